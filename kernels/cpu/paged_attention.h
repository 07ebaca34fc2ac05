// Paged attention on CPU: writing a step's K/V into the paged pool, and the decode and
// prefill attention kernels that read keys and values through a block table.
//
// Memory layout of one layer's K and V in the pool (PagedKvLayer; see worker/kv_cache.h
// for how layers and blocks are interleaved), in bytes, with elements of the pool's
// KvDtype (kv_layout.h) of e bytes:
//   K tile of block b, kv-head h at  k + b*block_stride + h*head_stride:
//       [head_dim][block_size] elements ("K transposed": (d, slot s) at d*block_size + s);
//       kInt8: kv_layout.h's K tile (4 values of d per slot together, scales after).
//   V tile of block b, kv-head h at  v + b*block_stride + h*head_stride:
//       [block_size][head_dim] elements ((slot s, d) at s*head_dim + d);
//       kInt8: kv_layout.h's V tile (4 slots per d together, scales after).
//   head_stride >= KvTileBytes(dtype, head_dim, block_size).
// Token at position p of a sequence lives in block block_table[p / block_size], slot
// p % block_size. For 16-bit and int8 pools the kernels read a block's K and V tiles,
// widen them to fp32 once (exactly: x' as stored) and run the fp32 arithmetic below on
// them, for every query row that shares the block.
//
// Activations: q, k, v and out are token-major, token i at base + i*stride; within a
// token, head h occupies [h*head_dim, (h+1)*head_dim). Query head h reads kv-head
// h / (num_heads / num_kv_heads) (grouped-query attention).
//
// Arithmetic (one definition for decode and prefill, so a token's output is bitwise the
// same whether it is decoded, prefilled in one shot or in chunks of any size): the query
// at position p attends to keys lo(p)..p (lo = 0, or with a sliding window W,
// lo = max(0, p - W + 1): llama.cpp's standard SWA masks keys with p - key >= W), visited
// block by block in block-table order from lo's block on, with a running-max ("online")
// softmax:
//   s_j = (sum_d q[d] * K[d][j]) * scale    for the valid slots j (reference: sequential
//         over d; AVX-512: four interleaved chains, paged_attention_avx512.cc)
//   m' = max(m, max_j s_j);  a = exp(m - m');  p_j = exp(s_j - m')
//   l = l*a + sum_j p_j;  acc[d] = acc[d]*a + sum_j p_j * V[j][d]  (sums in slot order)
//   out = acc / l.
// Implementations: kReference (portable C++, separate multiply and add, libm expf),
// kAvx512 (FMA and a polynomial exp, needs block_size % 16 == 0 and head_dim % 16 == 0)
// and kAvx512Vnni (kAvx512, except that int8 KV takes integer dot products, below),
// chosen once per model: each is batch invariant and chunking invariant on its own.
// Sliding windows: only the portable kernel starts a block part-way (its first valid
// slot per row). A row whose window cuts its context (lo(p) > 0) is computed by the
// portable kernel whatever the implementation; the others by the chosen one, exactly as
// without a window (lo = 0 either way). Which kernel a row gets depends on its position
// alone, so batch and chunking invariance hold, and the AVX-512 kernels' arithmetic is
// unchanged (they never see a window). Cost on AVX-512 CPUs: rows past the window run
// the scalar kernel over window-many keys (work bounded by W per row, not by p).
//
// Int8 KV on kAvx512Vnni (kv_layout.h's tiles, spans of up to 64 key slots as kAvx512):
//   each query row is rounded once per call: amax = max |q|, q8 = rne(q * (127 / amax))
//   clamped to [-127, 127], qs = (amax / 127) * scale;
//   s_j = float(sum_d q8[d] * k8_j[d]) * (kscale_j * qs)       (exact int32 sum)
//   m', a, p_j and l as above (p_j = 0 past the valid slots);
//   p'_j = p_j * vscale_j, pm = max_j p'_j, pq_j = rne(p'_j * (255 / pm)) (u8; 0 if pm = 0);
//   acc[d] = fma(float(sum_j pq_j * v8_j[d]), pm / 255, acc[d] * a)   (exact int32 sum)
//   out = acc / l.
// Rounding q and p to 8 bits is judged by the model's accuracy criteria
// (worker/model/llama_accuracy_test), as the int8 matmuls are.
// Thread-safety: pure functions; concurrent calls must write disjoint outputs/slots.
#ifndef WEFT_KERNELS_CPU_PAGED_ATTENTION_H_
#define WEFT_KERNELS_CPU_PAGED_ATTENTION_H_

#include <cstdint>

#include "kernels/cpu/kv_layout.h"

namespace weft::kernels {

enum class AttentionImpl {
  kReference,
  kAvx512,
  kAvx512Vnni,
};

const char* AttentionImplName(AttentionImpl impl);
// Bytes of one kv head's K (or V) tile of one block, scales included.
int64_t KvTileBytes(KvDtype dtype, int32_t head_dim, int32_t block_size);
// kInt8 needs head_dim % 4 == 0; the others take any shape.
bool KvDtypeSupported(KvDtype dtype, int32_t head_dim);
bool AttentionSupported(AttentionImpl impl, int32_t block_size, int32_t head_dim);
AttentionImpl BestAttentionImpl(int32_t block_size, int32_t head_dim);

// Largest num_heads / num_kv_heads the kernels accept.
inline constexpr int32_t kMaxQueriesPerKvHead = 32;

// One layer's K and V inside the paged pool (layout above). Plain data; the pool is
// owned elsewhere.
struct PagedKvLayer {
  KvDtype dtype = KvDtype::kF32;
  uint8_t* k = nullptr;      // K tile of block 0, kv head 0
  uint8_t* v = nullptr;      // V tile of block 0, kv head 0
  int64_t block_stride = 0;  // bytes between consecutive blocks
  int64_t head_stride = 0;   // bytes between consecutive kv heads of one block
  int32_t block_size = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;

  uint8_t* KTile(int64_t block, int32_t head) const {
    return k + block * block_stride + head * head_stride;
  }
  uint8_t* VTile(int64_t block, int32_t head) const {
    return v + block * block_stride + head * head_stride;
  }
};

// The value a pool of `dtype` stores for x (what the kernels read back), e.g. for tests.
// `head` holds the head_dim values of x's token and kv head (x among them; kInt8 scales
// by their largest).
float KvRoundTrip(KvDtype dtype, float x, const float* head, int32_t head_dim);

// Stores token i's K and V rows (k_src/v_src + i*src_stride, num_kv_heads*head_dim
// floats each) into pool slot slot_mapping[i] = block*block_size + slot, converted to
// the pool's dtype; a negative slot is skipped. Tokens [token_begin, token_end) only.
void WritePagedKv(const PagedKvLayer& kv, const float* k_src, const float* v_src,
                  int64_t src_stride, const int64_t* slot_mapping, int64_t token_begin,
                  int64_t token_end);

// Shape shared by both attention kernels.
struct AttentionParams {
  int32_t num_heads = 0;
  float scale = 1.0f;             // usually 1/sqrt(head_dim)
  int32_t kv_head_begin = 0;      // this call computes kv heads [begin, end) and the
  int32_t kv_head_end = 0;        //   query heads that share them,
  int32_t group_begin = 0;        //   or only query heads [begin, end) of each group
  int32_t group_end = -1;         //   (-1 = the whole group). Results do not change.
  int32_t window = 0;             // > 0: sliding window (keys p - window + 1 .. p only)
};

// Decode: one query token at position context_len - 1, attending to keys
// [0, context_len) (the window's part of them) through block_table
// (ceil(context_len / block_size) entries; those before the window's block are not read).
// q, out: [num_heads * head_dim].
void PagedDecodeAttention(AttentionImpl impl, const float* q, const PagedKvLayer& kv,
                          const int32_t* block_table, int32_t context_len,
                          const AttentionParams& params, float* out);

// Prefill (causal, chunked-prefill aware): query tokens i in [q_begin, q_end) of a chunk
// at positions start_pos + i; query i attends to keys [0, start_pos + i] (the window's
// part of them) through block_table, whose K/V (including this chunk's) must already be
// written.
// q: rows of num_heads*head_dim floats at q + i*q_stride; out likewise with out_stride.
void PagedPrefillAttention(AttentionImpl impl, const float* q, int64_t q_stride,
                           int32_t start_pos, int32_t q_begin, int32_t q_end,
                           const PagedKvLayer& kv, const int32_t* block_table,
                           const AttentionParams& params, float* out, int64_t out_stride);

}  // namespace weft::kernels

#endif  // WEFT_KERNELS_CPU_PAGED_ATTENTION_H_

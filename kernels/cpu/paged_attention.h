// Paged attention on CPU: writing a step's K/V into the paged pool, and the decode and
// prefill attention kernels that read keys and values through a block table.
//
// Memory layout of one layer's K and V in the pool (PagedKvLayer; see worker/kv_cache.h
// for how layers and blocks are interleaved), in bytes, with elements of the pool's
// KvDtype (kv_layout.h) of e bytes:
//   K tile of block b, kv-head h at  k + b*block_stride + h*head_stride:
//       [head_dim][block_size] elements ("K transposed": (d, slot s) at d*block_size + s);
//       kInt8: then the fp16 scales, [head_dim/8][block_size] ((group g, slot s) at
//       g*block_size + s).
//   V tile of block b, kv-head h at  v + b*block_stride + h*head_stride:
//       [block_size][head_dim] elements ((slot s, d) at s*head_dim + d);
//       kInt8: then the fp16 scales, [block_size][head_dim/8].
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
// at position p attends to keys 0..p, visited block by block in block-table order with
// a running-max ("online") softmax:
//   s_j = (sum_d q[d] * K[d][j]) * scale    for the valid slots j (reference: sequential
//         over d; AVX-512: four interleaved chains, paged_attention_avx512.cc)
//   m' = max(m, max_j s_j);  a = exp(m - m');  p_j = exp(s_j - m')
//   l = l*a + sum_j p_j;  acc[d] = acc[d]*a + sum_j p_j * V[j][d]  (sums in slot order)
//   out = acc / l.
// Implementations: kReference (portable C++, separate multiply and add, libm expf) and
// kAvx512 (FMA and a polynomial exp, needs block_size % 16 == 0 and head_dim % 16 == 0),
// chosen once per model: each is batch invariant and chunking invariant on its own.
// Thread-safety: pure functions; concurrent calls must write disjoint outputs/slots.
#ifndef WEFT_KERNELS_CPU_PAGED_ATTENTION_H_
#define WEFT_KERNELS_CPU_PAGED_ATTENTION_H_

#include <cstdint>

#include "kernels/cpu/kv_layout.h"

namespace weft::kernels {

enum class AttentionImpl {
  kReference,
  kAvx512,
};

const char* AttentionImplName(AttentionImpl impl);
const char* KvDtypeName(KvDtype dtype);
// Bytes of one kv head's K (or V) tile of one block, scales included.
int64_t KvTileBytes(KvDtype dtype, int32_t head_dim, int32_t block_size);
// kInt8 needs head_dim % 8 == 0; the others take any shape.
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
// For kInt8, `group` holds the 8 values of x's group (x among them) along head_dim.
float KvRoundTrip(KvDtype dtype, float x, const float* group);

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
};

// Decode: one query token at position context_len - 1, attending to keys
// [0, context_len) through block_table (ceil(context_len / block_size) entries).
// q, out: [num_heads * head_dim].
void PagedDecodeAttention(AttentionImpl impl, const float* q, const PagedKvLayer& kv,
                          const int32_t* block_table, int32_t context_len,
                          const AttentionParams& params, float* out);

// Prefill (causal, chunked-prefill aware): query tokens i in [q_begin, q_end) of a chunk
// at positions start_pos + i; query i attends to keys [0, start_pos + i] through
// block_table, whose K/V (including this chunk's) must already be written.
// q: rows of num_heads*head_dim floats at q + i*q_stride; out likewise with out_stride.
void PagedPrefillAttention(AttentionImpl impl, const float* q, int64_t q_stride,
                           int32_t start_pos, int32_t q_begin, int32_t q_end,
                           const PagedKvLayer& kv, const int32_t* block_table,
                           const AttentionParams& params, float* out, int64_t out_stride);

}  // namespace weft::kernels

#endif  // WEFT_KERNELS_CPU_PAGED_ATTENTION_H_

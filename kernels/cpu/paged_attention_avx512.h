// The per-block step of paged attention (see paged_attention.h), shared by the decode and
// prefill drivers in paged_attention.cc, in three implementations: portable
// (paged_attention.cc), AVX-512 (paged_attention_avx512.cc) and, for int8 KV, AVX-512
// VNNI integer dot products (paged_attention_vnni.cc) — the only files built with
// AVX-512 flags; they include <immintrin.h>, <cstdint>, avx512_math.h and this header,
// which defines no functions, so no shared inline code is compiled for AVX-512.
// Thread-safety: pure functions; rows must not alias.
#ifndef WEFT_KERNELS_CPU_PAGED_ATTENTION_AVX512_H_
#define WEFT_KERNELS_CPU_PAGED_ATTENTION_AVX512_H_

#include <cstdint>

#include "kernels/cpu/kv_layout.h"

namespace weft::kernels {

// Up to kMaxBlocksPerUpdate consecutive K/V blocks of one kv head (in block-table
// order), taken as one span of num_blocks * block_size key slots for one online-softmax
// update, against `num_rows` query rows (the rows of the query heads sharing that kv
// head, for one or more tokens). Row r sees slots [first_valid[r], num_valid[r]) of the
// span (0 <= first_valid[r] < num_valid[r] <= num_blocks * block_size; first_valid null:
// all 0) and carries its running max m[r], running sum l[r] and accumulator
// acc[r][0, head_dim). The portable kernel takes one block per call and is the only one
// given a first_valid (a sliding window starting inside the block; paged_attention.h).
inline constexpr int kMaxBlocksPerUpdate = 4;

struct AttentionBlockRows {
  int32_t num_blocks = 1;
  const float* kt[kMaxBlocksPerUpdate] = {};  // [head_dim][block_size] each
  const float* v[kMaxBlocksPerUpdate] = {};   // [block_size][head_dim] each
  // AVX-512 only: with dtype kF16 or kBf16, the tiles are read from k_raw / v_raw as the
  // pool stores them (same layout) instead of kt / v.
  KvDtype dtype = KvDtype::kF32;
  const uint8_t* k_raw[kMaxBlocksPerUpdate] = {};
  const uint8_t* v_raw[kMaxBlocksPerUpdate] = {};
  int32_t block_size = 0;
  int32_t head_dim = 0;
  float scale = 1.0f;
  int32_t num_rows = 0;
  const float* const* q = nullptr;
  const int32_t* num_valid = nullptr;
  const int32_t* first_valid = nullptr;  // portable kernel only (see above)
  float* m = nullptr;
  float* l = nullptr;
  float* const* acc = nullptr;
};

// Int8 KV (kv_layout.h) with integer dot products: one span update (as above: up to
// kMaxBlocksPerUpdate blocks) for query rows quantized once by the caller (the
// arithmetic is in paged_attention.h, "int8 KV on kAvx512Vnni").
struct Int8AttentionRows {
  int32_t num_blocks = 1;
  const uint8_t* k[kMaxBlocksPerUpdate] = {};  // int8 K tiles
  const uint8_t* v[kMaxBlocksPerUpdate] = {};  // int8 V tiles
  int32_t block_size = 0;
  int32_t head_dim = 0;
  int32_t num_rows = 0;
  const int8_t* const* q = nullptr;  // head_dim int8 per row
  const float* q_scale = nullptr;    // per row: the query's scale times the softmax scale
  const int32_t* q_sum = nullptr;    // per row: sum of its int8 values
  const int32_t* num_valid = nullptr;
  float* m = nullptr;
  float* l = nullptr;
  float* const* acc = nullptr;
};

namespace avx512vnni {
// Requires block_size % 16 == 0, head_dim % 16 == 0 and an AVX-512 VNNI CPU.
void AttendSpanInt8(const Int8AttentionRows& rows);
// A query row rounded to int8 as paged_attention.h says (head_dim % 16 == 0):
// out[head_dim], *scale = (amax / 127) * softmax_scale, *sum = sum of out.
void QuantizeQuery(const float* q, int32_t head_dim, float softmax_scale, int8_t* out,
                   float* scale, int32_t* sum);
}  // namespace avx512vnni

namespace avx512 {
// Requires block_size % 16 == 0, head_dim % 16 == 0 and an AVX-512F CPU.
void AttendBlock(const AttentionBlockRows& rows);
// A block's K and V tiles of `dtype` (paged_attention.h's layout) widened to fp32:
// kt [head_dim][block_size], vt [block_size][head_dim]; the same values as the portable
// widening. Requires block_size % 16 == 0, head_dim % 16 == 0.
void WidenTiles(KvDtype dtype, const uint8_t* k, const uint8_t* v, int32_t head_dim,
                int32_t block_size, float* kt, float* vt);
// dst[i] = fp16(src[i]) rounded to nearest even (what Fp32ToFp16 gives), i < n.
void Fp32ToFp16Row(const float* src, int32_t n, uint16_t* dst);
// One token's K and V rows of one kv head into slot `slot` of int8 tiles (kv_layout.h):
// the same bytes as the portable write. Writes only that slot's bytes (byte-masked
// stores), so other threads may write other slots of the same tiles meanwhile.
// Requires head_dim % 16 == 0, head_dim <= 1024.
void WriteInt8Slot(const float* k, const float* v, int32_t head_dim, int32_t block_size,
                   int32_t slot, uint8_t* k_tile, uint8_t* v_tile);
}  // namespace avx512

}  // namespace weft::kernels

#endif  // WEFT_KERNELS_CPU_PAGED_ATTENTION_AVX512_H_

// AVX-512 matmul with on-the-fly dequantization (see quant_matmul.h for the contract and
// quant_matmul_avx512.h for why this file includes nothing shared).
//
// Per output (i, j) the arithmetic is always the same, whatever the tile it falls in:
//   lo = hi = 0 (16 lanes each)
//   for each 32-weight block b in order:
//     lo = fma(W[j][32b .. 32b+15],  X[i][32b .. 32b+15],  lo)
//     hi = fma(W[j][32b+16 .. 32b+31], X[i][32b+16 .. 32b+31], hi)
//   Y[i][j] = reduce_add(lo + hi)            (one fixed shuffle tree)
// Dequantized weights are exact (d*q and d*q+m are exactly representable or rounded
// once, as in the scalar reference). Tiles only decide how many outputs share one
// dequantized block and one load of X: MR tokens x NR rows.
#include "kernels/cpu/quant_matmul_avx512.h"

#include <immintrin.h>

#include <cstdint>

namespace weft::kernels::avx512 {
namespace {

constexpr int64_t kBlock = 32;

// The fp16 pair (a, b) at p as floats: [a, b, a, b, ...] (a in even lanes). One
// broadcast load and one conversion; moveldup / movehdup then give all-a / all-b.
inline __m512 BroadcastHalfPair(const uint8_t* p) {
  uint32_t v;
  __builtin_memcpy(&v, p, sizeof(v));
  return _mm512_cvtph_ps(_mm256_set1_epi32(static_cast<int>(v)));
}

// Dequantizes block b (32 weights) of the row at `row` into lo (weights 0..15) and
// hi (16..31). Block layouts are GGUF's (common/ggml_types.h).
template <int F>
inline void Dequant(const uint8_t* row, int64_t b, __m512* lo, __m512* hi);

template <>
inline void Dequant<kFormatF32>(const uint8_t* row, int64_t b, __m512* lo, __m512* hi) {
  const float* p = reinterpret_cast<const float*>(row) + b * kBlock;
  *lo = _mm512_loadu_ps(p);
  *hi = _mm512_loadu_ps(p + 16);
}

template <>
inline void Dequant<kFormatF16>(const uint8_t* row, int64_t b, __m512* lo, __m512* hi) {
  const uint8_t* p = row + b * kBlock * 2;
  *lo = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  *hi = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
}

inline __m512 Bf16x16ToPs(const uint8_t* p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

template <>
inline void Dequant<kFormatBf16>(const uint8_t* row, int64_t b, __m512* lo, __m512* hi) {
  const uint8_t* p = row + b * kBlock * 2;
  *lo = Bf16x16ToPs(p);
  *hi = Bf16x16ToPs(p + 32);
}

// Q4_0 block (18 bytes): fp16 d, 16 bytes; byte i = q[i] | q[i + 16] << 4; w = d*(q-8),
// looked up in a 16-entry table as for Q4_1.
template <>
inline void Dequant<kFormatQ4_0>(const uint8_t* row, int64_t b, __m512* lo, __m512* hi) {
  const uint8_t* p = row + b * 18;
  const __m512 d = _mm512_moveldup_ps(BroadcastHalfPair(p));
  const __m512 iota = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
  const __m512 table = _mm512_mul_ps(iota, d);
  const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2)));
  *lo = _mm512_permutexvar_ps(q, table);
  *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), table);
}

// Q4_1 block (20 bytes): fp16 d, fp16 m, 16 bytes of nibbles; w = d*q + m (d*q is exact,
// so the fused form rounds exactly like the reference's d*q + m). The 16 possible
// weights of the block are computed once as a table (fma(i, d, m), i = 0..15) and looked
// up with vpermps, which reads only the low 4 bits of each index: no mask, no int->float
// conversion.
template <>
inline void Dequant<kFormatQ4_1>(const uint8_t* row, int64_t b, __m512* lo, __m512* hi) {
  const uint8_t* p = row + b * 20;
  const __m512 dm = BroadcastHalfPair(p);
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512 table = _mm512_fmadd_ps(iota, _mm512_moveldup_ps(dm), _mm512_movehdup_ps(dm));
  const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 4)));
  *lo = _mm512_permutexvar_ps(q, table);
  *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), table);
}

// Q8_0 block (34 bytes): fp16 d, 32 int8; w = d*q.
template <>
inline void Dequant<kFormatQ8_0>(const uint8_t* row, int64_t b, __m512* lo, __m512* hi) {
  const uint8_t* p = row + b * 34;
  const __m512 d = _mm512_moveldup_ps(BroadcastHalfPair(p));
  const __m512i ql = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2)));
  const __m512i qh = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 18)));
  *lo = _mm512_mul_ps(_mm512_cvtepi32_ps(ql), d);
  *hi = _mm512_mul_ps(_mm512_cvtepi32_ps(qh), d);
}

// Software prefetch distance along the weight stream. The rows of a tile are adjacent,
// so the tiles walk one contiguous stream; hardware prefetch alone left a single thread
// at ~5 GB/s on the model's weights, 8 KB ahead brings it near the streaming rate.
constexpr int64_t kPrefetchBytes = 8192;
// Bytes of one 32-weight block of format F.
template <int F>
constexpr int64_t BlockBytes() {
  return F == kFormatF32                      ? 128
         : F == kFormatF16 || F == kFormatBf16 ? 64
         : F == kFormatQ4_0                   ? 18
         : F == kFormatQ4_1                   ? 20
                                              : 34;
}

// MR tokens (rows of X from x) x NR weight rows (from j0): see the file comment.
template <int F, int MR, int NR>
void Tile(const uint8_t* w, int64_t row_stride, int64_t num_blocks, const float* x,
          int64_t ldx, float* y, int64_t ldy, int64_t j0) {
  __m512 lo[MR][NR];
  __m512 hi[MR][NR];
#pragma GCC unroll 16
  for (int t = 0; t < MR; ++t) {
#pragma GCC unroll 16
    for (int r = 0; r < NR; ++r) lo[t][r] = hi[t][r] = _mm512_setzero_ps();
  }
  const uint8_t* rows[NR];
#pragma GCC unroll 16
  for (int r = 0; r < NR; ++r) rows[r] = w + (j0 + r) * row_stride;
  for (int64_t b = 0; b < num_blocks; ++b) {
    __m512 wl[NR];
    __m512 wh[NR];
#pragma GCC unroll 16
    for (int r = 0; r < NR; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(rows[r]) + b * BlockBytes<F>() + kPrefetchBytes,
                   _MM_HINT_T0);
      Dequant<F>(rows[r], b, &wl[r], &wh[r]);
    }
#pragma GCC unroll 16
    for (int t = 0; t < MR; ++t) {
      const __m512 xl = _mm512_loadu_ps(x + t * ldx + b * kBlock);
      const __m512 xh = _mm512_loadu_ps(x + t * ldx + b * kBlock + 16);
#pragma GCC unroll 16
      for (int r = 0; r < NR; ++r) {
        lo[t][r] = _mm512_fmadd_ps(wl[r], xl, lo[t][r]);
        hi[t][r] = _mm512_fmadd_ps(wh[r], xh, hi[t][r]);
      }
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < MR; ++t) {
#pragma GCC unroll 16
    for (int r = 0; r < NR; ++r) {
      y[t * ldy + j0 + r] = _mm512_reduce_add_ps(_mm512_add_ps(lo[t][r], hi[t][r]));
    }
  }
}

// Columns [n_begin, n_end) for MR tokens: NR rows at a time, then single rows.
template <int F, int MR, int NR>
void Columns(const uint8_t* w, int64_t row_stride, int64_t num_blocks, const float* x,
             int64_t ldx, float* y, int64_t ldy, int64_t n_begin, int64_t n_end) {
  int64_t j = n_begin;
  for (; j + NR <= n_end; j += NR) {
    Tile<F, MR, NR>(w, row_stride, num_blocks, x, ldx, y, ldy, j);
  }
  for (; j < n_end; ++j) Tile<F, MR, 1>(w, row_stride, num_blocks, x, ldx, y, ldy, j);
}

// Full tiles of kMr tokens sharing one dequantized row; at most 3 leftover tokens are
// done with 4 rows per dequantization round so that 8 accumulators are in flight.
constexpr int kMr = 8;

template <int F>
void Run(const uint8_t* w, int64_t row_stride, int64_t k, const float* x, int64_t ldx,
         int64_t m, float* y, int64_t ldy, int64_t n_begin, int64_t n_end) {
  const int64_t nb = k / kBlock;
  int64_t i = 0;
  for (; i + kMr <= m; i += kMr) {
    Columns<F, kMr, 1>(w, row_stride, nb, x + i * ldx, ldx, y + i * ldy, ldy, n_begin, n_end);
  }
  while (i < m) {
    const int64_t mt = m - i < 3 ? m - i : 3;
    const float* xt = x + i * ldx;
    float* yt = y + i * ldy;
    if (mt == 1) Columns<F, 1, 4>(w, row_stride, nb, xt, ldx, yt, ldy, n_begin, n_end);
    if (mt == 2) Columns<F, 2, 4>(w, row_stride, nb, xt, ldx, yt, ldy, n_begin, n_end);
    if (mt == 3) Columns<F, 3, 4>(w, row_stride, nb, xt, ldx, yt, ldy, n_begin, n_end);
    i += mt;
  }
}

}  // namespace

void Matmul(WeightFormat format, const uint8_t* w, int64_t row_stride, int64_t k,
            const float* x, int64_t ldx, int64_t m, float* y, int64_t ldy, int64_t n_begin,
            int64_t n_end) {
  switch (format) {
    case kFormatF32:
      return Run<kFormatF32>(w, row_stride, k, x, ldx, m, y, ldy, n_begin, n_end);
    case kFormatF16:
      return Run<kFormatF16>(w, row_stride, k, x, ldx, m, y, ldy, n_begin, n_end);
    case kFormatBf16:
      return Run<kFormatBf16>(w, row_stride, k, x, ldx, m, y, ldy, n_begin, n_end);
    case kFormatQ4_0:
      return Run<kFormatQ4_0>(w, row_stride, k, x, ldx, m, y, ldy, n_begin, n_end);
    case kFormatQ4_1:
      return Run<kFormatQ4_1>(w, row_stride, k, x, ldx, m, y, ldy, n_begin, n_end);
    case kFormatQ8_0:
      return Run<kFormatQ8_0>(w, row_stride, k, x, ldx, m, y, ldy, n_begin, n_end);
  }
}

}  // namespace weft::kernels::avx512

// AVX-512 kernel of the packed matmul (contract and layout in packed_matmul.h). Lanes
// are the 16 rows of a panel; activations are broadcast from memory. A tile is MR tokens
// x NP panels; the per-output arithmetic does not depend on it.
#include "kernels/cpu/packed_matmul_avx512.h"

#include <immintrin.h>

#include <cstdint>

namespace weft::kernels::avx512 {
namespace {

constexpr int64_t kPanel = 16;
constexpr int64_t kMaxBlocks = 16384 / 32;
constexpr int64_t kPrefetchBytes = 8192;
constexpr int kMaxMr = 8;

template <int F>
constexpr int64_t RecordBytes() {
  return F == kPackedQ8 ? 544 : 320;
}

// xs[t][b] = sum of x[t][32b .. 32b+31] (fixed order), for the Q4 m term.
void BlockSums(const float* x, int64_t ldx, int mr, int64_t nb, float (*xs)[kMaxBlocks]) {
  for (int t = 0; t < mr; ++t) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* p = x + t * ldx + 32 * b;
      xs[t][b] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_loadu_ps(p), _mm512_loadu_ps(p + 16)));
    }
  }
}

inline void Store(float* y, __m512 v, int64_t col0, int64_t n_begin, int64_t n_end) {
  // Lanes col0 + i with n_begin <= col0 + i < n_end.
  const int64_t lo = n_begin > col0 ? n_begin - col0 : 0;
  const int64_t hi = n_end - col0 < kPanel ? n_end - col0 : kPanel;
  if (lo == 0 && hi == kPanel) {
    _mm512_storeu_ps(y + col0, v);
    return;
  }
  if (hi <= lo) return;
  const __mmask16 mask = static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
  _mm512_mask_storeu_ps(y + col0, mask, v);
}

// MR tokens x NP panels starting at panel p0.
template <int F, int MR, int NP>
void Tile(const uint8_t* w, int64_t panel_bytes, int64_t nb, const float* x, int64_t ldx,
          const float (*xs)[kMaxBlocks], float* y, int64_t ldy, int64_t p0, int64_t n_begin,
          int64_t n_end) {
  __m512 acc[MR][NP];
#pragma GCC unroll 8
  for (int t = 0; t < MR; ++t) {
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p) acc[t][p] = _mm512_setzero_ps();
  }
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec[NP];
    __m512 s[MR][NP];
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p) {
      rec[p] = w + (p0 + p) * panel_bytes + b * RecordBytes<F>();
      _mm_prefetch(reinterpret_cast<const char*>(rec[p]) + kPrefetchBytes, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(rec[p]) + kPrefetchBytes + 256, _MM_HINT_T0);
#pragma GCC unroll 8
      for (int t = 0; t < MR; ++t) s[t][p] = _mm512_setzero_ps();
    }
    const float* xb = x + 32 * b;
    if (F == kPackedQ4) {
      for (int g = 0; g < 16; ++g) {
        __m512 ql[NP], qh[NP];
#pragma GCC unroll 8
        for (int p = 0; p < NP; ++p) {
          const __m512i v = _mm512_cvtepu8_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(rec[p] + 64 + 16 * g)));
          ql[p] = _mm512_permutexvar_ps(v, iota);  // reads the low nibble only
          qh[p] = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
        }
#pragma GCC unroll 8
        for (int t = 0; t < MR; ++t) {
          const __m512 xl = _mm512_set1_ps(xb[t * ldx + g]);
          const __m512 xh = _mm512_set1_ps(xb[t * ldx + g + 16]);
#pragma GCC unroll 8
          for (int p = 0; p < NP; ++p) {
            s[t][p] = _mm512_fmadd_ps(ql[p], xl, s[t][p]);
            s[t][p] = _mm512_fmadd_ps(qh[p], xh, s[t][p]);
          }
        }
      }
    } else {
      for (int g = 0; g < 32; ++g) {
        __m512 q[NP];
#pragma GCC unroll 8
        for (int p = 0; p < NP; ++p) {
          q[p] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(rec[p] + 32 + 16 * g))));
        }
#pragma GCC unroll 8
        for (int t = 0; t < MR; ++t) {
          const __m512 xv = _mm512_set1_ps(xb[t * ldx + g]);
#pragma GCC unroll 8
          for (int p = 0; p < NP; ++p) s[t][p] = _mm512_fmadd_ps(q[p], xv, s[t][p]);
        }
      }
    }
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p) {
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec[p])));
      __m512 m = _mm512_setzero_ps();
      if (F == kPackedQ4) {
        m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec[p] + 32)));
      }
#pragma GCC unroll 8
      for (int t = 0; t < MR; ++t) {
        acc[t][p] = _mm512_fmadd_ps(s[t][p], d, acc[t][p]);
        if (F == kPackedQ4) acc[t][p] = _mm512_fmadd_ps(m, _mm512_set1_ps(xs[t][b]), acc[t][p]);
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < MR; ++t) {
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p) {
      Store(y + t * ldy, acc[t][p], (p0 + p) * kPanel, n_begin, n_end);
    }
  }
}

// Panels covering [n_begin, n_end) for MR tokens: NP at a time, then one by one.
template <int F, int MR, int NP>
void Panels(const uint8_t* w, int64_t panel_bytes, int64_t nb, const float* x, int64_t ldx,
            const float (*xs)[kMaxBlocks], float* y, int64_t ldy, int64_t n_begin,
            int64_t n_end) {
  const int64_t p_end = (n_end + kPanel - 1) / kPanel;
  int64_t p = n_begin / kPanel;
  for (; p + NP <= p_end; p += NP) {
    Tile<F, MR, NP>(w, panel_bytes, nb, x, ldx, xs, y, ldy, p, n_begin, n_end);
  }
  for (; p < p_end; ++p) Tile<F, MR, 1>(w, panel_bytes, nb, x, ldx, xs, y, ldy, p, n_begin, n_end);
}

// Register budget (32 zmm): MR * NP block sums + MR * NP accumulators + 2 NP weights.
template <int F>
void TokenTile(int mr, const uint8_t* w, int64_t panel_bytes, int64_t nb, const float* x,
               int64_t ldx, const float (*xs)[kMaxBlocks], float* y, int64_t ldy,
               int64_t n_begin, int64_t n_end) {
  switch (mr) {
    case 1: return Panels<F, 1, 4>(w, panel_bytes, nb, x, ldx, xs, y, ldy, n_begin, n_end);
    case 2: return Panels<F, 2, 3>(w, panel_bytes, nb, x, ldx, xs, y, ldy, n_begin, n_end);
    case 3: return Panels<F, 3, 2>(w, panel_bytes, nb, x, ldx, xs, y, ldy, n_begin, n_end);
    case 4: return Panels<F, 4, 2>(w, panel_bytes, nb, x, ldx, xs, y, ldy, n_begin, n_end);
    case 5: return Panels<F, 5, 1>(w, panel_bytes, nb, x, ldx, xs, y, ldy, n_begin, n_end);
    case 6: return Panels<F, 6, 1>(w, panel_bytes, nb, x, ldx, xs, y, ldy, n_begin, n_end);
    case 7: return Panels<F, 7, 1>(w, panel_bytes, nb, x, ldx, xs, y, ldy, n_begin, n_end);
    default: return Panels<F, 8, 1>(w, panel_bytes, nb, x, ldx, xs, y, ldy, n_begin, n_end);
  }
}

template <int F>
void Run(const uint8_t* w, int64_t k, const float* x, int64_t ldx, int64_t m, float* y,
         int64_t ldy, int64_t n_begin, int64_t n_end) {
  const int64_t nb = k / 32;
  const int64_t panel_bytes = nb * RecordBytes<F>();
  float xs[kMaxMr][kMaxBlocks];
  for (int64_t i = 0; i < m; i += kMaxMr) {
    const int mr = static_cast<int>(m - i < kMaxMr ? m - i : kMaxMr);
    if (F == kPackedQ4) BlockSums(x + i * ldx, ldx, mr, nb, xs);
    TokenTile<F>(mr, w, panel_bytes, nb, x + i * ldx, ldx, xs, y + i * ldy, ldy, n_begin, n_end);
  }
}

}  // namespace

void PackedMatmul(PackedFormat format, const uint8_t* w, int64_t n, int64_t k, const float* x,
                  int64_t ldx, int64_t m, float* y, int64_t ldy, int64_t n_begin,
                  int64_t n_end) {
  (void)n;
  if (format == kPackedQ4) {
    Run<kPackedQ4>(w, k, x, ldx, m, y, ldy, n_begin, n_end);
  } else {
    Run<kPackedQ8>(w, k, x, ldx, m, y, ldy, n_begin, n_end);
  }
}

}  // namespace weft::kernels::avx512

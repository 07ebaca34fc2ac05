// AVX2 kernel of the int8 matmul (contract, layout and per-output arithmetic in
// int8_matmul.h) for CPUs without AVX-512. A 16-row panel is two 8-lane halves (bytes
// 0..31 and 32..63 of each 64-byte vector). `vpdpbusd` is emulated exactly by
// vpmaddubsw + vpmaddwd: Q4 weights are 0..15, so the int16 pair sums cannot saturate;
// Q8_0 weights use |w| and sign(x, w) (at most 128 * 127 * 2 < 32767). The integer dot
// products, and so the outputs, are bitwise those of the other paths.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/int8_matmul_isa.h"

namespace weft::kernels::avx2 {
namespace {

constexpr int64_t kPanel = kInt8PanelRows;

enum Format { kQ4 = 0, kQ8 = 1 };

template <int F>
constexpr int64_t RecordBytes() {
  return F == kQ8 ? kInt8Q8RecordBytes : kInt8Q4RecordBytes;
}

inline int32_t LoadI32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline __m256i Dot4(__m256i acc, __m256i u8, __m256i s8, __m256i ones16) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u8, s8), ones16));
}

// Stores the 8 lanes of half h of a panel whose first column is col0.
inline void Store(float* y, __m256 v, int64_t col0, int64_t n_begin, int64_t n_end) {
  if (col0 >= n_begin && col0 + 8 <= n_end) {
    _mm256_storeu_ps(y + col0, v);
    return;
  }
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, v);
  for (int l = 0; l < 8; ++l) {
    if (col0 + l >= n_begin && col0 + l < n_end) y[col0 + l] = tmp[l];
  }
}

template <int F, int MR>
void Tile(const uint8_t* panel, int64_t nb, const Q8Rows& x, int64_t i0, float* y, int64_t ldy,
          int64_t col0, int64_t n_begin, int64_t n_end) {
  const __m256i ones16 = _mm256_set1_epi16(1);
  const __m256i nib = _mm256_set1_epi8(0x0F);
  __m256 acc[MR][2];
  for (int t = 0; t < MR; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = panel + b * RecordBytes<F>();
    for (int h = 0; h < 2; ++h) {
      __m256i isum[MR];
      for (int t = 0; t < MR; ++t) isum[t] = _mm256_setzero_si256();
      if (F == kQ4) {
        for (int j = 0; j < 4; ++j) {
          const __m256i v =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 64 + 64 * j + 32 * h));
          const __m256i lo = _mm256_and_si256(v, nib);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
          for (int t = 0; t < MR; ++t) {
            const int8_t* xb = x.q + (i0 + t) * x.k + 32 * b;
            isum[t] = Dot4(isum[t], lo, _mm256_set1_epi32(LoadI32(xb + 4 * j)), ones16);
            isum[t] = Dot4(isum[t], hi, _mm256_set1_epi32(LoadI32(xb + 16 + 4 * j)), ones16);
          }
        }
      } else {
        for (int g = 0; g < 8; ++g) {
          const __m256i v =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 32 + 64 * g + 32 * h));
          const __m256i u = _mm256_abs_epi8(v);
          for (int t = 0; t < MR; ++t) {
            const int8_t* xb = x.q + (i0 + t) * x.k + 32 * b;
            const __m256i s = _mm256_sign_epi8(_mm256_set1_epi32(LoadI32(xb + 4 * g)), v);
            isum[t] = Dot4(isum[t], u, s, ones16);
          }
        }
      }
      const __m256 dw =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + 16 * h)));
      __m256 mw = _mm256_setzero_ps();
      if (F == kQ4) {
        mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + 32 + 16 * h)));
      }
      for (int t = 0; t < MR; ++t) {
        const int64_t xi = (i0 + t) * nb + b;
        const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(x.d[xi]));
        acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), scale, acc[t][h]);
        if (F == kQ4) acc[t][h] = _mm256_fmadd_ps(mw, _mm256_set1_ps(x.ds[xi]), acc[t][h]);
      }
    }
  }
  for (int t = 0; t < MR; ++t) {
    for (int h = 0; h < 2; ++h) Store(y + (i0 + t) * ldy, acc[t][h], col0 + 8 * h, n_begin, n_end);
  }
}

template <int F>
void Run(const Int8PackedMatrix& w, const Q8Rows& x, int64_t m, float* y, int64_t ldy,
         int64_t n_begin, int64_t n_end) {
  const int64_t nb = w.k / 32;
  const int64_t panel_bytes = nb * RecordBytes<F>();
  for (int64_t p = n_begin / kPanel; p * kPanel < n_end; ++p) {
    const uint8_t* panel = w.data + p * panel_bytes;
    int64_t i = 0;
    for (; i + 2 <= m; i += 2) Tile<F, 2>(panel, nb, x, i, y, ldy, p * kPanel, n_begin, n_end);
    if (i < m) Tile<F, 1>(panel, nb, x, i, y, ldy, p * kPanel, n_begin, n_end);
  }
}

}  // namespace

void Int8Matmul(const Int8PackedMatrix& w, const Q8Rows& x, int64_t m, float* y, int64_t ldy,
                int64_t n_begin, int64_t n_end) {
  if (w.type == GgmlType::kQ8_0) {
    Run<kQ8>(w, x, m, y, ldy, n_begin, n_end);
  } else {
    Run<kQ4>(w, x, m, y, ldy, n_begin, n_end);
  }
}

}  // namespace weft::kernels::avx2

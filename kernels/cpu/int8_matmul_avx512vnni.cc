// AVX-512 VNNI kernel of the int8 matmul (contract, layout and per-output arithmetic in
// int8_matmul.h). Lanes are the 16 rows of a panel; each `vpdpbusd` multiplies 4
// unsigned weight bytes per lane by 4 signed activation bytes broadcast to all lanes.
// A tile is MR rows of x times NP panels; the per-output arithmetic does not depend on
// it. Panel groups are the outer loop, so a group's weights stay in cache while every
// row of x passes over them (weights are read from memory once per call).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/int8_matmul_isa.h"

namespace weft::kernels::avx512vnni {
namespace {

constexpr int64_t kPanel = kInt8PanelRows;
constexpr int64_t kPrefetchBytes = 4096;

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

inline void Store(float* y, __m512 v, int64_t col0, int64_t n_begin, int64_t n_end) {
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

// MR rows of x (starting at row i0) x NP panels (starting at panel p0).
template <int F, int MR, int NP>
void Tile(const uint8_t* w, int64_t panel_bytes, int64_t nb, const Q8Rows& x, int64_t i0,
          float* y, int64_t ldy, int64_t p0, int64_t n_begin, int64_t n_end) {
  __m512 acc[MR][NP];
#pragma GCC unroll 8
  for (int t = 0; t < MR; ++t) {
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p) acc[t][p] = _mm512_setzero_ps();
  }
  const __m512i nib = _mm512_set1_epi8(0x0F);
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  const int8_t* xrow[MR];
#pragma GCC unroll 8
  for (int t = 0; t < MR; ++t) xrow[t] = x.q + (i0 + t) * x.k;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec[NP];
    __m512i isum[MR][NP];
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p) {
      rec[p] = w + (p0 + p) * panel_bytes + b * RecordBytes<F>();
      _mm_prefetch(reinterpret_cast<const char*>(rec[p]) + kPrefetchBytes, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(rec[p]) + kPrefetchBytes + 256, _MM_HINT_T0);
#pragma GCC unroll 8
      for (int t = 0; t < MR; ++t) isum[t][p] = _mm512_setzero_si512();
    }
    if (F == kQ4) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
#pragma GCC unroll 8
        for (int p = 0; p < NP; ++p) {
          const __m512i v = _mm512_loadu_si512(rec[p] + 64 + 64 * j);
          const __m512i lo = _mm512_and_si512(v, nib);
          const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
#pragma GCC unroll 8
          for (int t = 0; t < MR; ++t) {
            const int8_t* xb = xrow[t] + 32 * b;
            isum[t][p] = _mm512_dpbusd_epi32(isum[t][p], lo, _mm512_set1_epi32(LoadI32(xb + 4 * j)));
            isum[t][p] =
                _mm512_dpbusd_epi32(isum[t][p], hi, _mm512_set1_epi32(LoadI32(xb + 16 + 4 * j)));
          }
        }
      }
    } else {
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
#pragma GCC unroll 8
        for (int p = 0; p < NP; ++p) {
          // Signed weights as unsigned (q + 128); the bias is taken out below.
          const __m512i v = _mm512_xor_si512(_mm512_loadu_si512(rec[p] + 32 + 64 * g), bias);
#pragma GCC unroll 8
          for (int t = 0; t < MR; ++t) {
            const int8_t* xb = xrow[t] + 32 * b;
            isum[t][p] = _mm512_dpbusd_epi32(isum[t][p], v, _mm512_set1_epi32(LoadI32(xb + 4 * g)));
          }
        }
      }
    }
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p) {
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec[p])));
      __m512 mw = _mm512_setzero_ps();
      if (F == kQ4) {
        mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec[p] + 32)));
      }
#pragma GCC unroll 8
      for (int t = 0; t < MR; ++t) {
        const int64_t xi = (i0 + t) * nb + b;
        __m512i is = isum[t][p];
        if (F == kQ8) is = _mm512_sub_epi32(is, _mm512_set1_epi32(128 * x.qsum[xi]));
        const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(x.d[xi]));
        acc[t][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), scale, acc[t][p]);
        if (F == kQ4) acc[t][p] = _mm512_fmadd_ps(mw, _mm512_set1_ps(x.ds[xi]), acc[t][p]);
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < MR; ++t) {
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p) {
      Store(y + (i0 + t) * ldy, acc[t][p], (p0 + p) * kPanel, n_begin, n_end);
    }
  }
}

// Every row of x over NP panels starting at p0: 6 rows at a time, then the rest. 6 x 2
// keeps the 12 float and 12 int accumulators, the weights and the nibble mask in the 32
// zmm registers with little spilling; measured ~8-10 % faster than 4 x 3 at m >= 64 on
// a VNNI Xeon (kernels:cpu_quant_matmul_benchmark, single thread, interleaved).
template <int F, int NP>
void RowsOverPanels(const uint8_t* w, int64_t panel_bytes, int64_t nb, const Q8Rows& x,
                    int64_t m, float* y, int64_t ldy, int64_t p0, int64_t n_begin,
                    int64_t n_end) {
  constexpr int kMr = 6;
  int64_t i = 0;
  for (; i + kMr <= m; i += kMr) {
    Tile<F, kMr, NP>(w, panel_bytes, nb, x, i, y, ldy, p0, n_begin, n_end);
  }
  if (m - i >= 4) {
    Tile<F, 4, NP>(w, panel_bytes, nb, x, i, y, ldy, p0, n_begin, n_end);
    i += 4;
  }
  switch (m - i) {
    case 3: return Tile<F, 3, NP>(w, panel_bytes, nb, x, i, y, ldy, p0, n_begin, n_end);
    case 2: return Tile<F, 2, NP>(w, panel_bytes, nb, x, i, y, ldy, p0, n_begin, n_end);
    case 1: return Tile<F, 1, NP>(w, panel_bytes, nb, x, i, y, ldy, p0, n_begin, n_end);
    default: return;
  }
}

template <int F>
void Run(const Int8PackedMatrix& w, const Q8Rows& x, int64_t m, float* y, int64_t ldy,
         int64_t n_begin, int64_t n_end) {
  constexpr int kNp = 2;
  const int64_t nb = w.k / 32;
  const int64_t panel_bytes = nb * RecordBytes<F>();
  const int64_t p_end = (n_end + kPanel - 1) / kPanel;
  int64_t p = n_begin / kPanel;
  for (; p + kNp <= p_end; p += kNp) {
    RowsOverPanels<F, kNp>(w.data, panel_bytes, nb, x, m, y, ldy, p, n_begin, n_end);
  }
  for (; p < p_end; ++p) {
    RowsOverPanels<F, 1>(w.data, panel_bytes, nb, x, m, y, ldy, p, n_begin, n_end);
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

void QuantizeRowsQ8(const float* x, int64_t ldx, int64_t row_begin, int64_t row_end, Q8Rows* out) {
  const int64_t nb = out->k / 32;  // not Q8Rows::blocks(): no inline code shared with baseline units
  const __m512 sign = _mm512_set1_ps(-0.0f);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (int64_t i = row_begin; i < row_end; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + i * ldx + 32 * b;
      const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
      const float amax = _mm512_reduce_max_ps(
          _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1)));
      const float d = amax / 127.0f;
      const __m512 id = _mm512_set1_ps(amax != 0 ? 127.0f / amax : 0.0f);
      // cvtps rounds to nearest even (the default MXCSR mode), as nearbyint does.
      const __m512i q0 = _mm512_min_epi32(hi, _mm512_max_epi32(lo, _mm512_cvtps_epi32(_mm512_mul_ps(v0, id))));
      const __m512i q1 = _mm512_min_epi32(hi, _mm512_max_epi32(lo, _mm512_cvtps_epi32(_mm512_mul_ps(v1, id))));
      int8_t* q = out->q + i * out->k + 32 * b;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtepi32_epi8(q1));
      const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
      out->d[i * nb + b] = d;
      out->qsum[i * nb + b] = sum;
      out->ds[i * nb + b] = d * static_cast<float>(sum);
    }
  }
}

int64_t PeakLoop(int64_t iters) {
  constexpr int kChains = 12;
  __m512i acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_epi32(c);
  const __m512i a = _mm512_set1_epi8(1);
  __m512i b = _mm512_set1_epi8(2);
  __asm__ volatile("" : "+v"(b));  // not a constant the compiler can fold
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbusd_epi32(acc[c], a, b);
  }
  __m512i sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_epi32(sum, acc[c]);
  volatile int32_t sink = _mm512_reduce_add_epi32(sum);
  (void)sink;
  return iters * kChains * 64;
}

}  // namespace weft::kernels::avx512vnni

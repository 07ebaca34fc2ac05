// AVX2 kernel of the int8 matmul's K formats (Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; layout and
// per-output arithmetic in int8_matmul.h, byte offsets in int8_kformats.h). It is also
// what AVX-512 VNNI and AMX machines run for these types (Int8IsaFor). As in
// int8_matmul_avx2.cc, a 16-row panel is two 8-lane halves and `vpdpbusd` is emulated
// exactly by vpmaddubsw + vpmaddwd: quants are unsigned (at most 63) and the int16 sums
// stay below 32767 (DotVectorPair). The 5th and 6th bits come from the high-bit
// planes by a shift, a mask and an or per 32 bytes. The integer sums are exact and the
// fp32 steps those of the contract, so the outputs are bitwise the scalar reference's.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/int8_kformats.h"
#include "kernels/cpu/int8_matmul_isa.h"

namespace weft::kernels::avx2 {
namespace {

using kformat::Layout;

constexpr int64_t kPanel = kInt8PanelRows;

inline int32_t LoadI32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// v shifted so that bit `From` of each byte lands on bit `To` (16-bit shifts: the bits
// that cross a byte boundary never reach the masked bits, see int8_matmul.h's layout).
template <int From, int To>
inline __m256i MoveBits(__m256i v) {
  if constexpr (From < To) return _mm256_slli_epi16(v, To - From);
  if constexpr (From > To) return _mm256_srli_epi16(v, From - To);
  return v;
}

inline __m128i Load8(const uint8_t* p) {
  return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
}

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

// The quants of vector J of half h of a block (low-nibble weights 4J.., high 16+4J..),
// as unsigned bytes.
template <int F, int J>
inline void Quants(const uint8_t* blk, int h, __m256i* lo, __m256i* hi) {
  constexpr Layout L = kformat::kLayouts[F];
  const __m256i nib = _mm256_set1_epi8(0x0F);
  const __m256i v = _mm256_loadu_si256(
      reinterpret_cast<const __m256i*>(blk + kformat::NibbleOffset(L) + 64 * J + 32 * h));
  *lo = _mm256_and_si256(v, nib);
  *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
  if constexpr (L.bits == 5) {
    const __m256i hb = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(blk + kformat::HighBitsOffset(L) + 32 * h));
    const __m256i bit4 = _mm256_set1_epi8(0x10);
    *lo = _mm256_or_si256(*lo, _mm256_and_si256(MoveBits<2 * J, 4>(hb), bit4));
    *hi = _mm256_or_si256(*hi, _mm256_and_si256(MoveBits<2 * J + 1, 4>(hb), bit4));
  } else if constexpr (L.bits == 6) {
    const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
        blk + kformat::HighBitsOffset(L) + 64 * (J / 2) + 32 * h));
    const __m256i bits45 = _mm256_set1_epi8(0x30);
    *lo = _mm256_or_si256(*lo, _mm256_and_si256(MoveBits<4 * (J % 2), 4>(hb), bits45));
    *hi = _mm256_or_si256(*hi, _mm256_and_si256(MoveBits<4 * (J % 2) + 2, 4>(hb), bits45));
  }
}

// Products of quants q (u8) and activations x (s8) of one 4-byte group per lane, summed
// in pairs to int16 (vpmaddubsw). Two of them (a vector pair J, J+1) are added in int16
// before vpmaddwd widens them: at most 2 * 2 * 63 * 127 = 32004 per lane for the 6-bit
// quants, 4 * 2 * 31 * 127 = 31496 where low and high nibbles share a sum (5 bits and
// fewer), so nothing saturates or wraps and the int32 sums stay exact.
inline __m256i Pairs(__m256i q, const int8_t* x) {
  return _mm256_maddubs_epi16(q, _mm256_set1_epi32(LoadI32(x)));
}

// isum[t][0] += the products of vectors J and J+1's low-nibble weights, isum[t][H] of
// their high ones (H = 1 for Q6_K, whose halves have their own scales; else 0), for
// panel half h.
template <int F, int MR, int J>
inline void DotVectorPair(const uint8_t* blk, int h, const int8_t* const* xb, __m256i (*isum)[2]) {
  const __m256i ones16 = _mm256_set1_epi16(1);
  __m256i lo0, hi0, lo1, hi1;
  Quants<F, J>(blk, h, &lo0, &hi0);
  Quants<F, J + 1>(blk, h, &lo1, &hi1);
  for (int t = 0; t < MR; ++t) {
    const __m256i plo = _mm256_add_epi16(Pairs(lo0, xb[t] + 4 * J), Pairs(lo1, xb[t] + 4 * J + 4));
    const __m256i phi =
        _mm256_add_epi16(Pairs(hi0, xb[t] + 16 + 4 * J), Pairs(hi1, xb[t] + 20 + 4 * J));
    if constexpr (F == kformat::kQ6K) {
      isum[t][0] = _mm256_add_epi32(isum[t][0], _mm256_madd_epi16(plo, ones16));
      isum[t][1] = _mm256_add_epi32(isum[t][1], _mm256_madd_epi16(phi, ones16));
    } else {
      isum[t][0] = _mm256_add_epi32(isum[t][0], _mm256_madd_epi16(_mm256_add_epi16(plo, phi), ones16));
    }
  }
}

// The same for both halves of the panel and one row of x (the decode case: the
// activation broadcasts are shared by the halves). isum[h][0..1] as above.
template <int F, int J>
inline void DotVectorPairBothHalves(const uint8_t* blk, const int8_t* xb, __m256i (*isum)[2]) {
  const __m256i ones16 = _mm256_set1_epi16(1);
  const __m256i x0 = _mm256_set1_epi32(LoadI32(xb + 4 * J));
  const __m256i x1 = _mm256_set1_epi32(LoadI32(xb + 4 * J + 4));
  const __m256i x2 = _mm256_set1_epi32(LoadI32(xb + 16 + 4 * J));
  const __m256i x3 = _mm256_set1_epi32(LoadI32(xb + 20 + 4 * J));
  for (int h = 0; h < 2; ++h) {
    __m256i lo0, hi0, lo1, hi1;
    Quants<F, J>(blk, h, &lo0, &hi0);
    Quants<F, J + 1>(blk, h, &lo1, &hi1);
    const __m256i plo = _mm256_add_epi16(_mm256_maddubs_epi16(lo0, x0), _mm256_maddubs_epi16(lo1, x1));
    const __m256i phi = _mm256_add_epi16(_mm256_maddubs_epi16(hi0, x2), _mm256_maddubs_epi16(hi1, x3));
    if constexpr (F == kformat::kQ6K) {
      isum[h][0] = _mm256_add_epi32(isum[h][0], _mm256_madd_epi16(plo, ones16));
      isum[h][1] = _mm256_add_epi32(isum[h][1], _mm256_madd_epi16(phi, ones16));
    } else {
      isum[h][0] = _mm256_add_epi32(isum[h][0], _mm256_madd_epi16(_mm256_add_epi16(plo, phi), ones16));
    }
  }
}

struct Rows {
  const Q8Rows* x;
  const int32_t* s16;
  int64_t i0;
  int64_t nb;
};

// acc[t] += the contract's terms of block b for half h (8 panel rows).
template <int F, int MR>
inline void Epilogue(const uint8_t* grp, const uint8_t* blk, int h, int64_t b, const Rows& rows,
                     __m256i (*isum)[2], __m256* acc) {
  const Q8Rows& x = *rows.x;
  const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(grp + 16 * h)));
  __m256 dw = d, mw = _mm256_setzero_ps();
  if constexpr (F == kformat::kQ5_1) {
    mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(grp + 32 + 16 * h)));
  } else if constexpr (F == kformat::kQ4K || F == kformat::kQ5K) {
    const __m256 dmin =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(grp + 32 + 16 * h)));
    const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(Load8(blk + 8 * h)));
    const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(Load8(blk + 16 + 8 * h)));
    dw = _mm256_mul_ps(d, sc);
    mw = _mm256_xor_ps(_mm256_mul_ps(dmin, mn), _mm256_set1_ps(-0.0f));  // exact negation
  }
  for (int t = 0; t < MR; ++t) {
    const int64_t xi = (rows.i0 + t) * rows.nb + b;
    __m256i is = isum[t][0];
    if constexpr (F == kformat::kQ5_0) {
      is = _mm256_sub_epi32(is, _mm256_set1_epi32(16 * x.qsum[xi]));
    } else if constexpr (F == kformat::kQ6K) {
      const int32_t* s = rows.s16 + (rows.i0 + t) * (2 * rows.nb) + 2 * b;
      const __m256i sc0 = _mm256_cvtepi8_epi32(Load8(blk + 8 * h));
      const __m256i sc1 = _mm256_cvtepi8_epi32(Load8(blk + 16 + 8 * h));
      is = _mm256_add_epi32(
          _mm256_mullo_epi32(sc0, _mm256_sub_epi32(isum[t][0], _mm256_set1_epi32(32 * s[0]))),
          _mm256_mullo_epi32(sc1, _mm256_sub_epi32(isum[t][1], _mm256_set1_epi32(32 * s[1]))));
    }
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(dw, _mm256_set1_ps(x.d[xi])),
                             acc[t]);
    if constexpr (F == kformat::kQ5_1 || F == kformat::kQ4K || F == kformat::kQ5K) {
      acc[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(x.ds[xi]), acc[t]);
    }
  }
}

// Rows i0..i0+MR-1 of x times half h (8 rows) of one panel, every block of K.
template <int F, int MR>
void Tile(const uint8_t* panel, int64_t groups, const Rows& rows, int h, float* y, int64_t ldy,
          int64_t col0, int64_t n_begin, int64_t n_end) {
  constexpr Layout L = kformat::kLayouts[F];
  constexpr int64_t kGroupBytes = kformat::GroupBytes(L);
  constexpr int64_t kBlockBytes = kformat::BlockBytes(L);
  const Q8Rows& x = *rows.x;
  __m256 acc[MR];
  for (int t = 0; t < MR; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* grp = panel + g * kGroupBytes;
    for (int64_t tb = 0; tb < L.blocks; ++tb) {
      const int64_t b = g * L.blocks + tb;
      const uint8_t* blk = grp + L.header_bytes + tb * kBlockBytes;
      const int8_t* xb[MR];
      __m256i isum[MR][2];
      for (int t = 0; t < MR; ++t) {
        xb[t] = x.q + (rows.i0 + t) * x.k + 32 * b;
        isum[t][0] = isum[t][1] = _mm256_setzero_si256();
      }
      DotVectorPair<F, MR, 0>(blk, h, xb, isum);
      DotVectorPair<F, MR, 2>(blk, h, xb, isum);
      Epilogue<F, MR>(grp, blk, h, b, rows, isum, acc);
    }
  }
  for (int t = 0; t < MR; ++t) Store(y + (rows.i0 + t) * ldy, acc[t], col0 + 8 * h, n_begin, n_end);
}

// One row i of x times a whole panel (both halves in one pass over its bytes: the
// decode case, where the weights stream from memory once).
template <int F>
void RowPanel(const uint8_t* panel, int64_t groups, const Rows& rows, float* y, int64_t ldy,
              int64_t col0, int64_t n_begin, int64_t n_end) {
  constexpr Layout L = kformat::kLayouts[F];
  constexpr int64_t kGroupBytes = kformat::GroupBytes(L);
  constexpr int64_t kBlockBytes = kformat::BlockBytes(L);
  const Q8Rows& x = *rows.x;
  __m256 acc[2][1] = {{_mm256_setzero_ps()}, {_mm256_setzero_ps()}};
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* grp = panel + g * kGroupBytes;
    _mm_prefetch(reinterpret_cast<const char*>(grp) + 2 * kGroupBytes, _MM_HINT_T0);
    for (int64_t tb = 0; tb < L.blocks; ++tb) {
      const int64_t b = g * L.blocks + tb;
      const uint8_t* blk = grp + L.header_bytes + tb * kBlockBytes;
      const int8_t* xb = x.q + rows.i0 * x.k + 32 * b;
      __m256i isum[2][2];
      for (int h = 0; h < 2; ++h) isum[h][0] = isum[h][1] = _mm256_setzero_si256();
      DotVectorPairBothHalves<F, 0>(blk, xb, isum);
      DotVectorPairBothHalves<F, 2>(blk, xb, isum);
      for (int h = 0; h < 2; ++h) Epilogue<F, 1>(grp, blk, h, b, rows, &isum[h], acc[h]);
    }
  }
  for (int h = 0; h < 2; ++h) Store(y + rows.i0 * ldy, acc[h][0], col0 + 8 * h, n_begin, n_end);
}

template <int F>
void Run(const Int8PackedMatrix& w, const Q8Rows& x, const int32_t* s16, int64_t m, float* y,
         int64_t ldy, int64_t n_begin, int64_t n_end) {
  constexpr Layout L = kformat::kLayouts[F];
  constexpr int kMr = 4;
  const int64_t groups = w.k / (32 * L.blocks);
  const int64_t panel_bytes = groups * kformat::GroupBytes(L);
  for (int64_t p = n_begin / kPanel; p * kPanel < n_end; ++p) {
    const uint8_t* panel = w.data + p * panel_bytes;
    // Whole tiles of kMr rows one half at a time (4 rows share each unpacked vector),
    // then the rest one row at a time over the whole panel.
    const int64_t tiled = m / kMr * kMr;
    for (int h = 0; h < 2 && tiled > 0; ++h) {
      const int64_t col0 = p * kPanel + 8 * h;
      if (col0 + 8 <= n_begin || col0 >= n_end) continue;  // no column of this half wanted
      for (int64_t i = 0; i < tiled; i += kMr) {
        Tile<F, kMr>(panel, groups, Rows{&x, s16, i, x.k / 32}, h, y, ldy, p * kPanel, n_begin,
                     n_end);
      }
    }
    for (int64_t i = tiled; i < m; ++i) {
      RowPanel<F>(panel, groups, Rows{&x, s16, i, x.k / 32}, y, ldy, p * kPanel, n_begin, n_end);
    }
  }
}

}  // namespace

void Int8MatmulK(const Int8PackedMatrix& w, const Q8Rows& x, const int32_t* s16, int64_t m,
                 float* y, int64_t ldy, int64_t n_begin, int64_t n_end) {
  switch (w.type) {
    case GgmlType::kQ5_0:
      return Run<kformat::kQ5_0>(w, x, s16, m, y, ldy, n_begin, n_end);
    case GgmlType::kQ5_1:
      return Run<kformat::kQ5_1>(w, x, s16, m, y, ldy, n_begin, n_end);
    case GgmlType::kQ4_K:
      return Run<kformat::kQ4K>(w, x, s16, m, y, ldy, n_begin, n_end);
    case GgmlType::kQ5_K:
      return Run<kformat::kQ5K>(w, x, s16, m, y, ldy, n_begin, n_end);
    default:
      return Run<kformat::kQ6K>(w, x, s16, m, y, ldy, n_begin, n_end);
  }
}

}  // namespace weft::kernels::avx2

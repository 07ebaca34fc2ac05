// AVX-512 block step of paged attention (contract in paged_attention_avx512.h and
// paged_attention.h). Per row the arithmetic is fixed whatever the other rows are:
//   scores of 16 keys: four 16-lane FMA chains over d (d mod 4), summed pairwise, times
//   scale;
//   max over valid lanes; p = exp(s - m') by a polynomial (rel. error ~2e-7), 0 for
//   invalid lanes; l = l*a + reduce_add(sum of the block's p vectors);
//   acc = acc*a, then acc = fma(p_j, V[j], acc) for j = 0..valid-1 in order.
// a = exp(m - m') uses the same polynomial (exp(-inf) = 0 for a row's first block).
#include "kernels/cpu/paged_attention_avx512.h"

#include <immintrin.h>

#include "kernels/cpu/avx512_math.h"

#include <cstdint>

namespace weft::kernels::avx512 {
namespace {

constexpr int32_t kMaxBlockSize = 1024;

inline __mmask16 ValidMask(int32_t n, int32_t c) {
  const int32_t valid = n - c * 16;
  if (valid >= 16) return 0xffff;
  if (valid <= 0) return 0;
  return static_cast<__mmask16>((1u << valid) - 1u);
}

// Raw scores q.K (before scale) of R rows starting at r0 for all block_size slots. Each
// score is four interleaved FMA chains over d (d mod 4), summed as (c0 + c1) + (c2 + c3):
// short dependency chains even for a single row.
template <int R>
void Scores(const AttentionBlockRows& rows, int32_t r0, float (*s)[kMaxBlockSize]) {
  const int32_t bs = rows.block_size;
  for (int32_t c = 0; c < bs / 16; ++c) {
    __m512 acc[R][4];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) acc[i][u] = _mm512_setzero_ps();
    }
    const float* kt = rows.kt + c * 16;
    for (int32_t d = 0; d < rows.head_dim; d += 4) {
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) {
        const __m512 k = _mm512_loadu_ps(kt + (d + u) * bs);
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) {
          acc[i][u] = _mm512_fmadd_ps(_mm512_set1_ps(rows.q[r0 + i][d + u]), k, acc[i][u]);
        }
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]),
                                       _mm512_add_ps(acc[i][2], acc[i][3]));
      _mm512_storeu_ps(s[i] + c * 16, sum);
    }
  }
}

// Softmax update and P.V for one row whose raw scores are in s.
void UpdateRow(const AttentionBlockRows& rows, int32_t r, float* s) {
  const int32_t bs = rows.block_size;
  const int32_t hd = rows.head_dim;
  const int32_t n = rows.num_valid[r];
  const __m512 scale = _mm512_set1_ps(rows.scale);
  const __m512 neg_inf = _mm512_set1_ps(-__builtin_inff());
  __m512 vmax = neg_inf;
  for (int32_t c = 0; c < bs / 16; ++c) {
    const __m512 sc = _mm512_mul_ps(_mm512_loadu_ps(s + c * 16), scale);
    _mm512_storeu_ps(s + c * 16, sc);
    vmax = _mm512_mask_max_ps(vmax, ValidMask(n, c), vmax, sc);
  }
  const float m_old = rows.m[r];
  const float block_max = _mm512_reduce_max_ps(vmax);
  const float m_new = m_old > block_max ? m_old : block_max;
  const float alpha = _mm512_cvtss_f32(ExpPoly(_mm512_set1_ps(m_old - m_new)));
  const __m512 vm = _mm512_set1_ps(m_new);
  __m512 vsum = _mm512_setzero_ps();
  for (int32_t c = 0; c < bs / 16; ++c) {
    const __mmask16 mask = ValidMask(n, c);
    const __m512 p = _mm512_maskz_mov_ps(mask, ExpPoly(_mm512_sub_ps(_mm512_loadu_ps(s + c * 16), vm)));
    _mm512_storeu_ps(s + c * 16, p);
    vsum = _mm512_add_ps(vsum, p);
  }
  rows.l[r] = rows.l[r] * alpha + _mm512_reduce_add_ps(vsum);
  rows.m[r] = m_new;
  const __m512 va = _mm512_set1_ps(alpha);
  float* acc = rows.acc[r];
  int32_t d = 0;
  for (; d + 64 <= hd; d += 64) {
    __m512 a0 = _mm512_mul_ps(_mm512_loadu_ps(acc + d), va);
    __m512 a1 = _mm512_mul_ps(_mm512_loadu_ps(acc + d + 16), va);
    __m512 a2 = _mm512_mul_ps(_mm512_loadu_ps(acc + d + 32), va);
    __m512 a3 = _mm512_mul_ps(_mm512_loadu_ps(acc + d + 48), va);
    for (int32_t j = 0; j < n; ++j) {
      const __m512 p = _mm512_set1_ps(s[j]);
      const float* v = rows.v + j * hd + d;
      a0 = _mm512_fmadd_ps(p, _mm512_loadu_ps(v), a0);
      a1 = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + 16), a1);
      a2 = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + 32), a2);
      a3 = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + 48), a3);
    }
    _mm512_storeu_ps(acc + d, a0);
    _mm512_storeu_ps(acc + d + 16, a1);
    _mm512_storeu_ps(acc + d + 32, a2);
    _mm512_storeu_ps(acc + d + 48, a3);
  }
  for (; d < hd; d += 16) {
    __m512 a0 = _mm512_mul_ps(_mm512_loadu_ps(acc + d), va);
    for (int32_t j = 0; j < n; ++j) {
      a0 = _mm512_fmadd_ps(_mm512_set1_ps(s[j]), _mm512_loadu_ps(rows.v + j * hd + d), a0);
    }
    _mm512_storeu_ps(acc + d, a0);
  }
}

inline __m512 Bf16x16(const uint8_t* p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
inline __m512 F16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 I8x16(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

}  // namespace

void Fp32ToFp16Row(const float* src, int32_t n, uint16_t* dst) {
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm256_mask_storeu_epi16(dst + i, m,
                             _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT));
  }
}

void WidenTiles(KvDtype dtype, const uint8_t* k, const uint8_t* v, int32_t head_dim,
                int32_t block_size, float* kt, float* vt) {
  const int64_t n = int64_t{head_dim} * block_size;
  switch (dtype) {
    case KvDtype::kF32:
      for (int64_t i = 0; i < n; i += 16) {
        _mm512_storeu_ps(kt + i, _mm512_loadu_ps(reinterpret_cast<const float*>(k) + i));
        _mm512_storeu_ps(vt + i, _mm512_loadu_ps(reinterpret_cast<const float*>(v) + i));
      }
      return;
    case KvDtype::kF16:
      for (int64_t i = 0; i < n; i += 16) {
        _mm512_storeu_ps(kt + i, F16x16(k + 2 * i));
        _mm512_storeu_ps(vt + i, F16x16(v + 2 * i));
      }
      return;
    case KvDtype::kBf16:
      for (int64_t i = 0; i < n; i += 16) {
        _mm512_storeu_ps(kt + i, Bf16x16(k + 2 * i));
        _mm512_storeu_ps(vt + i, Bf16x16(v + 2 * i));
      }
      return;
    case KvDtype::kInt8: {
      const uint8_t* ks = k + n;  // [head_dim/8][block_size] fp16
      const uint8_t* vs = v + n;  // [block_size][head_dim/8] fp16
      for (int32_t d = 0; d < head_dim; ++d) {
        const uint8_t* scale_row = ks + 2 * ((d / kKvInt8Group) * block_size);
        for (int32_t s = 0; s < block_size; s += 16) {
          _mm512_storeu_ps(kt + d * block_size + s,
                           _mm512_mul_ps(I8x16(k + d * block_size + s), F16x16(scale_row + 2 * s)));
        }
      }
      const int32_t groups = head_dim / kKvInt8Group;
      // Lanes 0-7 take the first scale of a 16-value chunk, lanes 8-15 the second.
      const __m512i pair = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
      for (int32_t s = 0; s < block_size; ++s) {
        for (int32_t d = 0; d < head_dim; d += 16) {
          const uint8_t* sc = vs + 2 * (s * groups + d / kKvInt8Group);
          uint32_t two;
          __builtin_memcpy(&two, sc, 4);
          const __m512 scales = _mm512_permutexvar_ps(
              pair, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(two)))));
          _mm512_storeu_ps(vt + s * head_dim + d, _mm512_mul_ps(I8x16(v + s * head_dim + d), scales));
        }
      }
      return;
    }
  }
}

void AttendBlock(const AttentionBlockRows& rows) {
  alignas(64) float s[4][kMaxBlockSize];
  int32_t r = 0;
  for (; r + 4 <= rows.num_rows; r += 4) {
    Scores<4>(rows, r, s);
    for (int i = 0; i < 4; ++i) UpdateRow(rows, r + i, s[i]);
  }
  const int32_t rest = rows.num_rows - r;
  if (rest == 3) Scores<3>(rows, r, s);
  if (rest == 2) Scores<2>(rows, r, s);
  if (rest == 1) Scores<1>(rows, r, s);
  for (int i = 0; i < rest; ++i) UpdateRow(rows, r + i, s[i]);
}

}  // namespace weft::kernels::avx512

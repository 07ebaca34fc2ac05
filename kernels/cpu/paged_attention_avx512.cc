// AVX-512 block step of paged attention (contract in paged_attention_avx512.h and
// paged_attention.h). f16 and bf16 tiles are read as they are stored and widened in
// registers (exactly), so they cost no extra pass. Per row the arithmetic is fixed
// whatever the other rows are:
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

// Loaders of 16 consecutive tile elements as fp32 (exact widening).
struct LoadF32 {
  static __m512 At(const void* base, int64_t i) {
    return _mm512_loadu_ps(static_cast<const float*>(base) + i);
  }
};
struct LoadF16 {
  static __m512 At(const void* base, int64_t i) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i)));
  }
};
struct LoadBf16 {
  static __m512 At(const void* base, int64_t i) {
    const __m512i w = _mm512_cvtepu16_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
};

// Raw scores q.K (before scale) of R rows starting at r0 for all block_size slots. Each
// score is four interleaved FMA chains over d (d mod 4), summed as (c0 + c1) + (c2 + c3):
// short dependency chains even for a single row.
template <int R, typename L>
void Scores(const AttentionBlockRows& rows, const void* const* kts, int32_t r0,
            float (*s)[kMaxBlockSize]) {
  const int32_t bs = rows.block_size;
  for (int32_t g = 0; g < rows.num_blocks; ++g) {
  const void* kt = kts[g];
  for (int32_t c = 0; c < bs / 16; ++c) {
    __m512 acc[R][4];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) acc[i][u] = _mm512_setzero_ps();
    }
    for (int32_t d = 0; d < rows.head_dim; d += 4) {
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) {
        const __m512 k = L::At(kt, int64_t{d + u} * bs + c * 16);
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
      _mm512_storeu_ps(s[i] + g * bs + c * 16, sum);
    }
  }
  }
}

// Softmax update of one row whose raw scores are in s: s becomes p (0 past the valid
// slots); returns alpha = exp(m_old - m_new).
float SoftmaxRow(const AttentionBlockRows& rows, int32_t r, float* s) {
  const int32_t bs = rows.block_size * rows.num_blocks;  // the span's slots
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
  return alpha;
}

// acc_i = acc_i * alpha_i, then acc_i = fma(p_i[j], V[j], acc_i) for j < num_valid[i] in
// order, for R rows together: each V row is loaded (and widened) once for all of them.
// W vectors of 16 dims at a time (columns [d, d + 16W)).
template <int R, int W, typename L>
void PvRows(const AttentionBlockRows& rows, const void* const* vts, int32_t r0,
            const float* alpha, float (*s)[kMaxBlockSize], int32_t d) {
  const int32_t hd = rows.head_dim;
  __m512 a[R][W];
  int32_t n_max = 0;
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    const __m512 va = _mm512_set1_ps(alpha[i]);
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) a[i][w] = _mm512_mul_ps(_mm512_loadu_ps(rows.acc[r0 + i] + d + 16 * w), va);
    n_max = n_max > rows.num_valid[r0 + i] ? n_max : rows.num_valid[r0 + i];
  }
  const int32_t bs = rows.block_size;
  for (int32_t j = 0; j < n_max; ++j) {
    const void* vt = vts[j / bs];
    const int64_t slot = j % bs;
    __m512 v[W];
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) v[w] = L::At(vt, slot * hd + d + 16 * w);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      if (j >= rows.num_valid[r0 + i]) continue;
      const __m512 p = _mm512_set1_ps(s[i][j]);
#pragma GCC unroll 4
      for (int w = 0; w < W; ++w) a[i][w] = _mm512_fmadd_ps(p, v[w], a[i][w]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) _mm512_storeu_ps(rows.acc[r0 + i] + d + 16 * w, a[i][w]);
  }
}

template <int R, typename L>
void Rows(const AttentionBlockRows& rows, const void* const* kt, const void* const* vt,
          int32_t r0) {
  alignas(64) float s[R][kMaxBlockSize];
  Scores<R, L>(rows, kt, r0, s);
  float alpha[R];
  for (int i = 0; i < R; ++i) alpha[i] = SoftmaxRow(rows, r0 + i, s[i]);
  int32_t d = 0;
  for (; d + 64 <= rows.head_dim; d += 64) PvRows<R, 4, L>(rows, vt, r0, alpha, s, d);
  for (; d < rows.head_dim; d += 16) PvRows<R, 1, L>(rows, vt, r0, alpha, s, d);
}

template <typename L>
void AttendBlockAs(const AttentionBlockRows& rows, const void* const* kt, const void* const* vt) {
  int32_t r = 0;
  for (; r + 4 <= rows.num_rows; r += 4) Rows<4, L>(rows, kt, vt, r);
  switch (rows.num_rows - r) {
    case 3: return Rows<3, L>(rows, kt, vt, r);
    case 2: return Rows<2, L>(rows, kt, vt, r);
    case 1: return Rows<1, L>(rows, kt, vt, r);
    default: return;
  }
}

inline __m512 Bf16x16(const uint8_t* p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
inline __m512 F16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
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

namespace {

// fp16(max |x| / 127) of n values (n % 16 == 0) and the int8 values round(x / scale)
// clamped to [-127, 127] (0 when the scale is 0), as 16-lane int32 vectors.
uint16_t QuantizeRow(const float* x, int32_t n, __m512i* q) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  __m512 vmax = _mm512_setzero_ps();
  for (int32_t d = 0; d < n; d += 16) vmax = _mm512_max_ps(vmax, _mm512_andnot_ps(sign, _mm512_loadu_ps(x + d)));
  const float scale32 = _mm512_reduce_max_ps(vmax) / 127.0f;
  const uint16_t h = _cvtss_sh(scale32, _MM_FROUND_TO_NEAREST_INT);
  const float scale = _cvtsh_ss(h);
  const __m512 vs = _mm512_set1_ps(scale);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (int32_t d = 0; d < n; d += 16) {
    // x / scale rounded to nearest even (the MXCSR default), as std::nearbyint.
    const __m512i v = scale == 0 ? _mm512_setzero_si512()
                                 : _mm512_cvtps_epi32(_mm512_div_ps(_mm512_loadu_ps(x + d), vs));
    q[d / 16] = _mm512_min_epi32(hi, _mm512_max_epi32(lo, v));
  }
  return h;
}

}  // namespace

void WriteInt8Slot(const float* k, const float* v, int32_t head_dim, int32_t block_size,
                   int32_t slot, uint8_t* k_tile, uint8_t* v_tile) {
  constexpr int32_t kMaxVectors = 64;  // head_dim <= 1024
  __m512i q[kMaxVectors];
  const int64_t data = int64_t{head_dim} * ((block_size + 3) / 4 * 4);
  // K: the 4 bytes of d = 4j..4j+3 (biased) are one dword at ((j * bs + slot) * 4).
  uint16_t h = QuantizeRow(k, head_dim, q);
  __builtin_memcpy(k_tile + data + 2 * slot, &h, 2);
  const __m512i bias = _mm512_set1_epi32(kKvInt8KBias);
  const __m512i stride = _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
      _mm512_set1_epi32(block_size * 4));
  for (int32_t d = 0; d < head_dim; d += 64) {
    // 64 values -> 64 bytes = 16 dwords (d..d+3, d+4..d+7, ...).
    alignas(64) uint8_t bytes[64];
    for (int u = 0; u < 4; ++u) {
      const __m512i b = d + 16 * u < head_dim ? _mm512_add_epi32(q[d / 16 + u], bias) : bias;
      _mm_store_si128(reinterpret_cast<__m128i*>(bytes + 16 * u), _mm512_cvtepi32_epi8(b));
    }
    const int32_t dwords = head_dim - d < 64 ? (head_dim - d) / 4 : 16;
    const __mmask16 m = static_cast<__mmask16>((1u << dwords) - 1u);
    uint8_t* base = k_tile + (int64_t{d / 4} * block_size + slot) * 4;
    _mm512_mask_i32scatter_epi32(base, m, stride, _mm512_load_si512(bytes), 1);
  }
  // V: byte (slot, d) at ((slot / 4) * hd + d) * 4 + slot % 4: one byte of each dword.
  h = QuantizeRow(v, head_dim, q);
  __builtin_memcpy(v_tile + data + 2 * slot, &h, 2);
  const int shift = 8 * (slot % 4);
  const __mmask64 bytes_mask = 0x1111111111111111ull << (slot % 4);
  uint8_t* row = v_tile + int64_t{slot / 4} * head_dim * 4;
  for (int32_t d = 0; d < head_dim; d += 16) {
    const __m512i b = _mm512_slli_epi32(_mm512_and_si512(q[d / 16], _mm512_set1_epi32(0xFF)), shift);
    _mm512_mask_storeu_epi8(row + int64_t{d} * 4, bytes_mask, b);
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
    case KvDtype::kInt8: {  // kv_layout.h (block_size % 16 == 0: no padded slots)
      const uint8_t* ks = k + n;  // fp16 scale per slot
      const uint8_t* vs = v + n;
      const __m512i byte = _mm512_set1_epi32(0xFF), bias = _mm512_set1_epi32(kKvInt8KBias);
      for (int32_t d4 = 0; d4 < head_dim / 4; ++d4) {
        for (int32_t s = 0; s < block_size; s += 16) {
          const __m512i w = _mm512_loadu_si512(k + (int64_t{d4} * block_size + s) * 4);
          const __m512 scale = F16x16(ks + 2 * s);
#pragma GCC unroll 4
          for (int e = 0; e < 4; ++e) {
            const __m512i q = _mm512_sub_epi32(_mm512_and_si512(_mm512_srli_epi32(w, 8 * e), byte), bias);
            _mm512_storeu_ps(kt + (4 * d4 + e) * block_size + s, _mm512_mul_ps(_mm512_cvtepi32_ps(q), scale));
          }
        }
      }
      for (int32_t s4 = 0; s4 < block_size / 4; ++s4) {
        for (int32_t d = 0; d < head_dim; d += 16) {
          const __m512i w = _mm512_loadu_si512(v + (int64_t{s4} * head_dim + d) * 4);
#pragma GCC unroll 4
          for (int e = 0; e < 4; ++e) {
            const int32_t s = 4 * s4 + e;
            const __m512i q = _mm512_srai_epi32(_mm512_slli_epi32(w, 24 - 8 * e), 24);
            uint16_t h;
            __builtin_memcpy(&h, vs + 2 * s, 2);
            const __m512 scale = _mm512_set1_ps(_cvtsh_ss(h));
            _mm512_storeu_ps(vt + s * head_dim + d, _mm512_mul_ps(_mm512_cvtepi32_ps(q), scale));
          }
        }
      }
      return;
    }
  }
}

void AttendBlock(const AttentionBlockRows& rows) {
  const void* k[kMaxBlocksPerUpdate];
  const void* v[kMaxBlocksPerUpdate];
  const bool raw = rows.dtype == KvDtype::kF16 || rows.dtype == KvDtype::kBf16;
  for (int32_t g = 0; g < rows.num_blocks; ++g) {
    k[g] = raw ? static_cast<const void*>(rows.k_raw[g]) : static_cast<const void*>(rows.kt[g]);
    v[g] = raw ? static_cast<const void*>(rows.v_raw[g]) : static_cast<const void*>(rows.v[g]);
  }
  switch (rows.dtype) {
    case KvDtype::kF16:
      return AttendBlockAs<LoadF16>(rows, k, v);
    case KvDtype::kBf16:
      return AttendBlockAs<LoadBf16>(rows, k, v);
    default:
      return AttendBlockAs<LoadF32>(rows, k, v);
  }
}

}  // namespace weft::kernels::avx512

// Int8 KV attention with integer dot products (AVX-512 VNNI): one online-softmax span
// update (paged_attention_avx512.h; arithmetic in paged_attention.h, "int8 KV on
// kAvx512Vnni"; tile layout in kv_layout.h). Per group of R query rows, each K and V
// vector is loaded once for all of them:
//   Q.K  `vpdpbusd` of 16 slots' biased K bytes (4 dims per slot) with 4 of the row's
//        int8 query bytes broadcast; the integer sums are exact, so splitting them over
//        several accumulators changes nothing;
//   P.V  `vpdpbusd` of 4 slots' rounded probabilities (u8, broadcast) with 16 dims x 4
//        slots of V; exact integer sums over the span, one fp32 step per span.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx512_math.h"
#include "kernels/cpu/paged_attention_avx512.h"

namespace weft::kernels::avx512vnni {
namespace {

using avx512::ExpPoly;

// Span slots at most: a span is whole blocks, at most 1024 slots.
constexpr int32_t kMaxSpan = 1024;

inline __mmask16 ValidMask(int32_t n, int32_t c) {
  const int32_t valid = n - c * 16;
  if (valid >= 16) return 0xffff;
  if (valid <= 0) return 0;
  return static_cast<__mmask16>((1u << valid) - 1u);
}

inline int32_t LoadI32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline __m512 F16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Where 16-slot chunk cc of the span lives: tile of block cc*16/bs, slot offset.
struct Chunk {
  int32_t block, slot;
};
inline Chunk ChunkAt(int32_t cc, int32_t bs) { return {cc * 16 / bs, cc * 16 % bs}; }

// Scores s[i][slot] = float(q_i . k_slot) * (kscale_slot * q_scale_i) for R rows and the
// chunks [0, chunks) of the span, NC chunks at a time (R x NC independent sums).
template <int R, int NC>
void ScoreChunks(const Int8AttentionRows& rows, int32_t r0, int32_t cc0,
                 float (*s)[kMaxSpan]) {
  const int32_t bs = rows.block_size, hd = rows.head_dim;
  const int64_t data = int64_t{hd} * bs;
  const uint8_t* kp[NC];
#pragma GCC unroll 4
  for (int c = 0; c < NC; ++c) {
    const Chunk ch = ChunkAt(cc0 + c, bs);
    kp[c] = rows.k[ch.block] + int64_t{ch.slot} * 4;
  }
  __m512i acc[R][NC];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) acc[i][c] = _mm512_setzero_si512();
  }
  for (int32_t d4 = 0; d4 < hd / 4; ++d4) {
    __m512i kv[NC];
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) kv[c] = _mm512_loadu_si512(kp[c] + int64_t{d4} * bs * 4);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const __m512i qb = _mm512_set1_epi32(LoadI32(rows.q[r0 + i] + 4 * d4));
#pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) acc[i][c] = _mm512_dpbusd_epi32(acc[i][c], kv[c], qb);
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < NC; ++c) {
    const Chunk ch = ChunkAt(cc0 + c, bs);
    const __m512 kscale = F16x16(rows.k[ch.block] + data + 2 * ch.slot);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      // The K bytes are q + 128: take 128 * sum(q_i) back out (exact).
      const __m512i is = _mm512_sub_epi32(acc[i][c], _mm512_set1_epi32(128 * rows.q_sum[r0 + i]));
      const __m512 t = _mm512_mul_ps(kscale, _mm512_set1_ps(rows.q_scale[r0 + i]));
      _mm512_storeu_ps(s[i] + (cc0 + c) * 16, _mm512_mul_ps(_mm512_cvtepi32_ps(is), t));
    }
  }
}

template <int R>
void Scores(const Int8AttentionRows& rows, int32_t r0, int32_t chunks, float (*s)[kMaxSpan]) {
  int32_t cc = 0;
  for (; cc + 4 <= chunks; cc += 4) ScoreChunks<R, 4>(rows, r0, cc, s);
  switch (chunks - cc) {
    case 3: return ScoreChunks<R, 3>(rows, r0, cc, s);
    case 2: return ScoreChunks<R, 2>(rows, r0, cc, s);
    case 1: return ScoreChunks<R, 1>(rows, r0, cc, s);
    default: return;
  }
}

// Softmax update of row r from its raw scores s (valid slots only); writes its
// probabilities times the V scales, rounded to u8, into pq (0 past the valid slots, up
// to `pad` slots) and returns alpha = exp(m_old - m_new) and dp, the value of one pq step.
float SoftmaxAndRoundP(const Int8AttentionRows& rows, int32_t r, const float* s, int32_t pad,
                       uint8_t* pq, float* dp) {
  const int32_t n = rows.num_valid[r];
  const int32_t bs = rows.block_size;
  const int64_t data = int64_t{rows.head_dim} * bs;
  const int32_t chunks = (n + 15) / 16;
  const __m512 neg_inf = _mm512_set1_ps(-__builtin_inff());
  __m512 vmax = neg_inf;
  for (int32_t c = 0; c < chunks; ++c) {
    vmax = _mm512_mask_max_ps(vmax, ValidMask(n, c), vmax, _mm512_loadu_ps(s + c * 16));
  }
  const float m_old = rows.m[r];
  const float block_max = _mm512_reduce_max_ps(vmax);
  const float m_new = m_old > block_max ? m_old : block_max;
  const float alpha = _mm512_cvtss_f32(ExpPoly(_mm512_set1_ps(m_old - m_new)));
  const __m512 vm = _mm512_set1_ps(m_new);
  __m512 vsum = _mm512_setzero_ps();
  __m512 pmax = _mm512_setzero_ps();
  alignas(64) float pv[kMaxSpan];
  for (int32_t c = 0; c < chunks; ++c) {
    const __mmask16 mask = ValidMask(n, c);
    const __m512 p = _mm512_maskz_mov_ps(mask, ExpPoly(_mm512_sub_ps(_mm512_loadu_ps(s + c * 16), vm)));
    vsum = _mm512_add_ps(vsum, p);
    const Chunk ch = ChunkAt(c, bs);
    const __m512 vscale = _mm512_maskz_mov_ps(mask, F16x16(rows.v[ch.block] + data + 2 * ch.slot));
    const __m512 pvc = _mm512_mul_ps(p, vscale);
    _mm512_store_ps(pv + c * 16, pvc);
    pmax = _mm512_max_ps(pmax, pvc);
  }
  rows.l[r] = rows.l[r] * alpha + _mm512_reduce_add_ps(vsum);
  rows.m[r] = m_new;
  const float pm = _mm512_reduce_max_ps(pmax);
  const __m512 inv = _mm512_set1_ps(pm > 0 ? 255.0f / pm : 0.0f);
  *dp = pm / 255.0f;
  for (int32_t c = 0; c < chunks; ++c) {
    // Round to nearest even (MXCSR default), saturate to u8.
    const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(pv + c * 16), inv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(pq + c * 16), _mm512_cvtusepi32_epi8(q));
  }
  std::memset(pq + chunks * 16, 0, static_cast<size_t>(pad > chunks * 16 ? pad - chunks * 16 : 0));
  return alpha;
}

// acc_i[d0 .. d0 + 16W) = acc_i * alpha_i + dp_i * float(sum_j pq_i[j] * vq_j[d]) over the
// first `slots` slots (a multiple of 4) of the span.
template <int R, int W>
void PvRows(const Int8AttentionRows& rows, int32_t r0, int32_t slots, const float* alpha,
            const float* dp, uint8_t (*pq)[kMaxSpan], int32_t d0) {
  const int32_t bs = rows.block_size, hd = rows.head_dim;
  __m512i isum[R][W];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) isum[i][w] = _mm512_setzero_si512();
  }
  for (int32_t j = 0; j < slots; j += 4) {
    const uint8_t* vp = rows.v[j / bs] + (int64_t{(j % bs) / 4} * hd + d0) * 4;
    __m512i vv[W];
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) vv[w] = _mm512_loadu_si512(vp + 64 * w);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const __m512i pb = _mm512_set1_epi32(LoadI32(pq[i] + j));
#pragma GCC unroll 4
      for (int w = 0; w < W; ++w) isum[i][w] = _mm512_dpbusd_epi32(isum[i][w], pb, vv[w]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    float* acc = rows.acc[r0 + i] + d0;
    const __m512 a = _mm512_set1_ps(alpha[i]), step = _mm512_set1_ps(dp[i]);
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) {
      const __m512 scaled = _mm512_mul_ps(_mm512_loadu_ps(acc + 16 * w), a);
      _mm512_storeu_ps(acc + 16 * w, _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][w]), step, scaled));
    }
  }
}

template <int R>
void Rows(const Int8AttentionRows& rows, int32_t r0) {
  alignas(64) float s[R][kMaxSpan];
  alignas(64) uint8_t pq[R][kMaxSpan];
  int32_t n_max = 0;
  for (int i = 0; i < R; ++i) n_max = n_max > rows.num_valid[r0 + i] ? n_max : rows.num_valid[r0 + i];
  const int32_t chunks = (n_max + 15) / 16;
  Scores<R>(rows, r0, chunks, s);
  const int32_t slots = (n_max + 3) / 4 * 4;
  float alpha[R], dp[R];
  for (int i = 0; i < R; ++i) alpha[i] = SoftmaxAndRoundP(rows, r0 + i, s[i], slots, pq[i], &dp[i]);
  int32_t d = 0;
  for (; d + 64 <= rows.head_dim; d += 64) PvRows<R, 4>(rows, r0, slots, alpha, dp, pq, d);
  for (; d < rows.head_dim; d += 16) PvRows<R, 1>(rows, r0, slots, alpha, dp, pq, d);
}

}  // namespace

void QuantizeQuery(const float* q, int32_t head_dim, float softmax_scale, int8_t* out,
                   float* scale, int32_t* sum) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  __m512 vmax = _mm512_setzero_ps();
  for (int32_t d = 0; d < head_dim; d += 16) {
    vmax = _mm512_max_ps(vmax, _mm512_andnot_ps(sign, _mm512_loadu_ps(q + d)));
  }
  const float amax = _mm512_reduce_max_ps(vmax);
  const __m512 inv = _mm512_set1_ps(amax != 0 ? 127.0f / amax : 0.0f);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  __m512i total = _mm512_setzero_si512();
  for (int32_t d = 0; d < head_dim; d += 16) {
    // cvtps rounds to nearest even (the default MXCSR mode).
    const __m512i v = _mm512_min_epi32(
        hi, _mm512_max_epi32(lo, _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(q + d), inv))));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + d), _mm512_cvtepi32_epi8(v));
    total = _mm512_add_epi32(total, v);
  }
  *scale = (amax / 127.0f) * softmax_scale;
  *sum = _mm512_reduce_add_epi32(total);
}

void AttendSpanInt8(const Int8AttentionRows& rows) {
  int32_t r = 0;
  for (; r + 4 <= rows.num_rows; r += 4) Rows<4>(rows, r);
  switch (rows.num_rows - r) {
    case 3: return Rows<3>(rows, r);
    case 2: return Rows<2>(rows, r);
    case 1: return Rows<1>(rows, r);
    default: return;
  }
}

}  // namespace weft::kernels::avx512vnni

#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/ggml_types.h"
#include "glog/logging.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/paged_attention_avx512.h"

namespace weft::kernels {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Query tokens processed together by the prefill driver (they share each K/V block).
constexpr int32_t kQueryTile = 8;
constexpr int32_t kMaxRows = kQueryTile * kMaxQueriesPerKvHead;
constexpr int32_t kMaxBlockSize = 1024;

uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
void Store16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// Scale of an int8 token row of n values: fp16(max |x| / 127).
uint16_t RowScale(const float* x, int32_t n) {
  float amax = 0;
  for (int32_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return Fp32ToFp16(amax / 127.0f);
}

int32_t RoundUp4(int32_t n) { return (n + 3) / 4 * 4; }
int8_t QuantizeInt8(float x, float scale) {
  if (scale == 0) return 0;
  const float q = std::nearbyint(x / scale);
  return static_cast<int8_t>(std::min(127.0f, std::max(-127.0f, q)));
}

// One token's K and V rows of one kv head into slot `slot` of the tiles.
void WriteHead(KvDtype dtype, const float* ks, const float* vs, int32_t hd, int32_t bs,
               int64_t slot, uint8_t* kt, uint8_t* vt) {
  switch (dtype) {
    case KvDtype::kF32: {
      float* k = reinterpret_cast<float*>(kt);
      for (int32_t d = 0; d < hd; ++d) k[d * bs + slot] = ks[d];
      std::memcpy(reinterpret_cast<float*>(vt) + slot * hd, vs, hd * sizeof(float));
      return;
    }
    case KvDtype::kF16:
      if (CpuFeatures::Get().HasAvx512() && hd <= 1024) {  // F16C rounding = Fp32ToFp16's
        uint16_t k16[1024];
        avx512::Fp32ToFp16Row(ks, hd, k16);
        avx512::Fp32ToFp16Row(vs, hd, reinterpret_cast<uint16_t*>(vt) + slot * hd);
        for (int32_t d = 0; d < hd; ++d) Store16(kt + 2 * (d * bs + slot), k16[d]);
        return;
      }
      for (int32_t d = 0; d < hd; ++d) {
        Store16(kt + 2 * (d * bs + slot), Fp32ToFp16(ks[d]));
        Store16(vt + 2 * (slot * hd + d), Fp32ToFp16(vs[d]));
      }
      return;
    case KvDtype::kBf16:
      for (int32_t d = 0; d < hd; ++d) {
        Store16(kt + 2 * (d * bs + slot), Fp32ToBf16(ks[d]));
        Store16(vt + 2 * (slot * hd + d), Fp32ToBf16(vs[d]));
      }
      return;
    case KvDtype::kInt8: {  // kv_layout.h
      if (CpuFeatures::Get().HasAvx512() && hd % 16 == 0 && hd <= 1024) {  // the same bytes
        avx512::WriteInt8Slot(ks, vs, hd, bs, static_cast<int32_t>(slot), kt, vt);
        return;
      }
      const int64_t data = int64_t{hd} * RoundUp4(bs);
      const uint16_t k16 = RowScale(ks, hd), v16 = RowScale(vs, hd);
      Store16(kt + data + 2 * slot, k16);
      Store16(vt + data + 2 * slot, v16);
      const float kscale = Fp16ToFp32(k16), vscale = Fp16ToFp32(v16);
      for (int32_t d = 0; d < hd; ++d) {
        kt[((d / 4) * bs + slot) * 4 + d % 4] =
            static_cast<uint8_t>(QuantizeInt8(ks[d], kscale) + kKvInt8KBias);
        vt[((slot / 4) * hd + d) * 4 + slot % 4] = static_cast<uint8_t>(QuantizeInt8(vs[d], vscale));
      }
      return;
    }
  }
}

// Portable widening of a block's K and V tiles to fp32 (exact: the stored values).
void WidenTilesReference(KvDtype dtype, const uint8_t* k, const uint8_t* v, int32_t hd,
                         int32_t bs, float* kt, float* vt) {
  const int64_t n = int64_t{hd} * bs;
  switch (dtype) {
    case KvDtype::kF32:
      std::memcpy(kt, k, n * sizeof(float));
      std::memcpy(vt, v, n * sizeof(float));
      return;
    case KvDtype::kF16:
      for (int64_t i = 0; i < n; ++i) {
        kt[i] = Fp16ToFp32(Load16(k + 2 * i));
        vt[i] = Fp16ToFp32(Load16(v + 2 * i));
      }
      return;
    case KvDtype::kBf16:
      for (int64_t i = 0; i < n; ++i) {
        kt[i] = Bf16ToFp32(Load16(k + 2 * i));
        vt[i] = Bf16ToFp32(Load16(v + 2 * i));
      }
      return;
    case KvDtype::kInt8: {  // kv_layout.h
      const int64_t data = int64_t{hd} * RoundUp4(bs);
      for (int32_t s = 0; s < bs; ++s) {
        const float kscale = Fp16ToFp32(Load16(k + data + 2 * s));
        const float vscale = Fp16ToFp32(Load16(v + data + 2 * s));
        for (int32_t d = 0; d < hd; ++d) {
          const int32_t kq = k[((d / 4) * bs + s) * 4 + d % 4] - kKvInt8KBias;
          const int8_t vq = static_cast<int8_t>(v[((s / 4) * hd + d) * 4 + s % 4]);
          kt[d * bs + s] = static_cast<float>(kq) * kscale;
          vt[s * hd + d] = static_cast<float>(vq) * vscale;
        }
      }
      return;
    }
  }
}

// Portable block step: separate multiply and add, sums in the documented order.
void AttendBlockReference(const AttentionBlockRows& rows) {
  const int32_t bs = rows.block_size;
  const int32_t hd = rows.head_dim;
  float s[kMaxBlockSize];
  for (int32_t r = 0; r < rows.num_rows; ++r) {
    const int32_t n = rows.num_valid[r];
    const int32_t f = rows.first_valid != nullptr ? rows.first_valid[r] : 0;
    DCHECK(0 <= f && f < n);
    const float* q = rows.q[r];
    for (int32_t j = f; j < n; ++j) s[j] = 0.0f;
    for (int32_t d = 0; d < hd; ++d) {
      const float qd = q[d];
      const float* kt = rows.kt[0] + d * bs;
      for (int32_t j = f; j < n; ++j) s[j] = s[j] + qd * kt[j];
    }
    float block_max = kNegInf;
    for (int32_t j = f; j < n; ++j) {
      s[j] = s[j] * rows.scale;
      block_max = std::max(block_max, s[j]);
    }
    const float m_new = std::max(rows.m[r], block_max);
    const float alpha = std::exp(rows.m[r] - m_new);
    float sum = 0.0f;
    for (int32_t j = f; j < n; ++j) {
      s[j] = std::exp(s[j] - m_new);
      sum = sum + s[j];
    }
    rows.l[r] = rows.l[r] * alpha + sum;
    rows.m[r] = m_new;
    float* acc = rows.acc[r];
    for (int32_t d = 0; d < hd; ++d) acc[d] = acc[d] * alpha;
    for (int32_t j = f; j < n; ++j) {
      const float p = s[j];
      const float* v = rows.v[0] + j * hd;
      for (int32_t d = 0; d < hd; ++d) acc[d] = acc[d] + p * v[d];
    }
  }
}

using AttendBlockFn = void (*)(const AttentionBlockRows&);
using WidenTilesFn = void (*)(KvDtype, const uint8_t*, const uint8_t*, int32_t, int32_t, float*,
                              float*);

struct Impl {
  AttendBlockFn attend;
  WidenTilesFn widen;
  bool reads_16bit;    // attend() reads f16 / bf16 tiles itself (no widening pass)
  int32_t span_slots;  // key slots per softmax update (whole blocks, at least one)
  bool int8_vnni;      // int8 tiles go to avx512vnni::AttendSpanInt8 (integer products)
};

// AVX-512: up to 64 key slots per online-softmax update (4 blocks of 16), which spreads
// each row's per-update reductions and exps over more keys; the grouping depends only on
// key positions, so decode and (chunked) prefill stay bitwise equal.
Impl GetImpl(AttentionImpl impl) {
  if (impl == AttentionImpl::kAvx512 || impl == AttentionImpl::kAvx512Vnni) {
    return {&avx512::AttendBlock, &avx512::WidenTiles, true, 64,
            impl == AttentionImpl::kAvx512Vnni};
  }
  return {&AttendBlockReference, &WidenTilesReference, false, 1, false};
}

// The query rows of int8 attention: int8 values, scale times the softmax scale, sums.
struct QueryQ8 {
  std::vector<int8_t> q;
  std::vector<float> scale;
  std::vector<int32_t> sum;
  const int8_t* rows[kMaxRows];
};

QueryQ8& QueryBuffer(int32_t rows, int32_t hd) {
  thread_local QueryQ8 b;
  if (static_cast<int64_t>(b.q.size()) < int64_t{rows} * hd) b.q.resize(int64_t{rows} * hd);
  if (static_cast<int32_t>(b.scale.size()) < rows) {
    b.scale.resize(rows);
    b.sum.resize(rows);
  }
  return b;
}

// Per-thread fp32 copies of one block's K and V tiles (16-bit and int8 pools).
float* WidenBuffer(int which, int64_t floats) {
  thread_local std::vector<float> buf[2];
  if (static_cast<int64_t>(buf[which].size()) < floats) buf[which].resize(floats);
  return buf[which].data();
}

// Query tokens [t_begin, t_end) at positions start_pos + t against kv head `h`: every
// query head of the group, block by block. Writes the group's output rows. With
// window > 0 (the portable kernel only), token t sees keys [lo(t), start_pos + t],
// lo(t) = max(0, start_pos + t - window + 1).
void AttendTokens(const Impl& impl, const float* q, int64_t q_stride, int32_t start_pos,
                  int32_t t_begin, int32_t t_end, const PagedKvLayer& kv,
                  const int32_t* block_table, const AttentionParams& params, int32_t window,
                  int32_t h, float* out, int64_t out_stride) {
  const int32_t group_size = params.num_heads / kv.num_kv_heads;
  const int32_t g0 = params.group_begin;
  const int32_t group = (params.group_end < 0 ? group_size : params.group_end) - g0;
  const int32_t hd = kv.head_dim;
  const int32_t bs = kv.block_size;
  const float* q_rows[kMaxRows];
  float* acc_rows[kMaxRows];
  float m[kMaxRows];
  float l[kMaxRows];
  int32_t num_valid[kMaxRows];
  int32_t first_valid[kMaxRows];
  const int32_t num_rows = (t_end - t_begin) * group;
  for (int32_t t = t_begin; t < t_end; ++t) {
    for (int32_t g = 0; g < group; ++g) {
      const int32_t r = (t - t_begin) * group + g;
      const int32_t head = h * group_size + g0 + g;
      q_rows[r] = q + t * q_stride + head * hd;
      acc_rows[r] = out + t * out_stride + head * hd;
      std::memset(acc_rows[r], 0, hd * sizeof(float));
      m[r] = kNegInf;
      l[r] = 0.0f;
    }
  }
  // Token t sees keys [lo(t), start_pos + t]; both ends grow with t, so the rows active
  // in a span are a contiguous range of the tile: a suffix without a window.
  auto lo = [&](int32_t t) { return window > 0 ? std::max(0, start_pos + t - window + 1) : 0; };
  DCHECK(window == 0 || impl.attend == &AttendBlockReference);
  const int32_t last_ctx = start_pos + t_end;
  const int32_t num_blocks = (last_ctx + bs - 1) / bs;
  const int32_t per_update =
      std::max(1, std::min<int32_t>(kMaxBlocksPerUpdate, impl.span_slots / bs));
  // Spans start at multiples of per_update blocks (from block 0 without a window).
  const int32_t first_block = lo(t_begin) / bs / per_update * per_update;
  const bool int8_vnni = impl.int8_vnni && kv.dtype == KvDtype::kInt8;
  QueryQ8* q8 = nullptr;
  if (int8_vnni) {
    q8 = &QueryBuffer(num_rows, hd);
    for (int32_t r = 0; r < num_rows; ++r) {
      q8->rows[r] = q8->q.data() + int64_t{r} * hd;
      avx512vnni::QuantizeQuery(q_rows[r], hd, params.scale, q8->q.data() + int64_t{r} * hd,
                                &q8->scale[r], &q8->sum[r]);
    }
  }
  for (int32_t b = first_block; b < num_blocks; b += per_update) {
    const int32_t span_blocks = std::min(per_update, num_blocks - b);
    const int32_t first_t = std::max(t_begin, b * bs - start_pos);
    // Tokens from end_t on start their window past this span.
    const int32_t end_t =
        window > 0 ? std::min(t_end, (b + span_blocks) * bs - start_pos + window - 1) : t_end;
    if (first_t >= end_t) continue;
    const int32_t first_row = (first_t - t_begin) * group;
    for (int32_t t = first_t; t < end_t; ++t) {
      const int32_t n = std::min(span_blocks * bs, start_pos + t + 1 - b * bs);
      const int32_t f = std::max(0, lo(t) - b * bs);
      for (int32_t g = 0; g < group; ++g) {
        num_valid[(t - t_begin) * group + g] = n;
        first_valid[(t - t_begin) * group + g] = f;
      }
    }
    const int32_t span_rows = (end_t - first_t) * group;
    if (int8_vnni) {
      Int8AttentionRows rows;
      rows.num_blocks = span_blocks;
      for (int32_t g = 0; g < span_blocks; ++g) {
        rows.k[g] = kv.KTile(block_table[b + g], h);
        rows.v[g] = kv.VTile(block_table[b + g], h);
      }
      rows.block_size = bs;
      rows.head_dim = hd;
      rows.num_rows = span_rows;
      rows.q = q8->rows + first_row;
      rows.q_scale = q8->scale.data() + first_row;
      rows.q_sum = q8->sum.data() + first_row;
      rows.num_valid = num_valid + first_row;
      rows.m = m + first_row;
      rows.l = l + first_row;
      rows.acc = acc_rows + first_row;
      avx512vnni::AttendSpanInt8(rows);
      continue;
    }
    AttentionBlockRows rows;
    rows.num_blocks = span_blocks;
    const bool direct16 =
        impl.reads_16bit && (kv.dtype == KvDtype::kF16 || kv.dtype == KvDtype::kBf16);
    for (int32_t g = 0; g < span_blocks; ++g) {
      const uint8_t* k_tile = kv.KTile(block_table[b + g], h);
      const uint8_t* v_tile = kv.VTile(block_table[b + g], h);
      if (kv.dtype == KvDtype::kF32) {
        rows.kt[g] = reinterpret_cast<const float*>(k_tile);
        rows.v[g] = reinterpret_cast<const float*>(v_tile);
      } else if (direct16) {
        rows.dtype = kv.dtype;
        rows.k_raw[g] = k_tile;
        rows.v_raw[g] = v_tile;
      } else {
        const int64_t tile = int64_t{hd} * bs;
        float* kt = WidenBuffer(0, kMaxBlocksPerUpdate * tile) + g * tile;
        float* vt = WidenBuffer(1, kMaxBlocksPerUpdate * tile) + g * tile;
        impl.widen(kv.dtype, k_tile, v_tile, hd, bs, kt, vt);
        rows.kt[g] = kt;
        rows.v[g] = vt;
      }
    }
    rows.block_size = bs;
    rows.head_dim = hd;
    rows.scale = params.scale;
    rows.num_rows = span_rows;
    rows.q = q_rows + first_row;
    rows.num_valid = num_valid + first_row;
    if (window > 0) rows.first_valid = first_valid + first_row;
    rows.m = m + first_row;
    rows.l = l + first_row;
    rows.acc = acc_rows + first_row;
    impl.attend(rows);
  }
  for (int32_t r = 0; r < num_rows; ++r) {
    for (int32_t d = 0; d < hd; ++d) acc_rows[r][d] = acc_rows[r][d] / l[r];
  }
}

// Tokens [t_begin, t_end) of a chunk at start_pos: those whose window cuts their context
// go to the portable kernel with the window, the others to `fns` without one
// (paged_attention.h: the choice depends on the position alone).
void AttendTokensWindowed(const Impl& fns, const float* q, int64_t q_stride, int32_t start_pos,
                          int32_t t_begin, int32_t t_end, const PagedKvLayer& kv,
                          const int32_t* block_table, const AttentionParams& params,
                          int32_t h, float* out, int64_t out_stride) {
  const int32_t w = params.window;
  // Token t's window cuts its context when start_pos + t - w + 1 > 0.
  const int32_t t_cut = w > 0 ? std::clamp(w - start_pos, t_begin, t_end) : t_end;
  if (t_begin < t_cut) {
    AttendTokens(fns, q, q_stride, start_pos, t_begin, t_cut, kv, block_table, params, 0, h,
                 out, out_stride);
  }
  if (t_cut < t_end) {
    AttendTokens(GetImpl(AttentionImpl::kReference), q, q_stride, start_pos, t_cut, t_end, kv,
                 block_table, params, w, h, out, out_stride);
  }
}

void CheckShapes(const PagedKvLayer& kv, const AttentionParams& params) {
  DCHECK_GT(kv.num_kv_heads, 0);
  DCHECK_EQ(params.num_heads % kv.num_kv_heads, 0);
  DCHECK_LE(params.num_heads / kv.num_kv_heads, kMaxQueriesPerKvHead);
  DCHECK(kv.block_size > 0 && kv.block_size <= kMaxBlockSize);
  DCHECK(0 <= params.kv_head_begin && params.kv_head_begin <= params.kv_head_end &&
         params.kv_head_end <= kv.num_kv_heads);
  DCHECK_GE(params.window, 0);
  DCHECK(params.group_end < 0 || (0 <= params.group_begin && params.group_begin < params.group_end &&
                                  params.group_end <= params.num_heads / kv.num_kv_heads));
}

}  // namespace

const char* AttentionImplName(AttentionImpl impl) {
  switch (impl) {
    case AttentionImpl::kReference:
      return "reference";
    case AttentionImpl::kAvx512:
      return "avx512";
    case AttentionImpl::kAvx512Vnni:
      return "avx512vnni";
  }
  return "?";
}

int64_t KvTileBytes(KvDtype dtype, int32_t head_dim, int32_t block_size) {
  const int64_t n = int64_t{head_dim} * block_size;
  switch (dtype) {
    case KvDtype::kF32:
      return 4 * n;
    case KvDtype::kF16:
    case KvDtype::kBf16:
      return 2 * n;
    case KvDtype::kInt8:
      return int64_t{head_dim} * RoundUp4(block_size) + 2 * int64_t{block_size};
  }
  return 0;
}

bool KvDtypeSupported(KvDtype dtype, int32_t head_dim) {
  return dtype != KvDtype::kInt8 || (head_dim > 0 && head_dim % 4 == 0);
}

float KvRoundTrip(KvDtype dtype, float x, const float* head, int32_t head_dim) {
  switch (dtype) {
    case KvDtype::kF32:
      return x;
    case KvDtype::kF16:
      return Fp16ToFp32(Fp32ToFp16(x));
    case KvDtype::kBf16:
      return Bf16ToFp32(Fp32ToBf16(x));
    case KvDtype::kInt8: {
      const float scale = Fp16ToFp32(RowScale(head, head_dim));
      return static_cast<float>(QuantizeInt8(x, scale)) * scale;
    }
  }
  return x;
}

bool AttentionSupported(AttentionImpl impl, int32_t block_size, int32_t head_dim) {
  if (block_size <= 0 || block_size > kMaxBlockSize || head_dim <= 0) return false;
  if (impl == AttentionImpl::kReference) return true;
  const CpuFeatures& f = CpuFeatures::Get();
  const bool isa = impl == AttentionImpl::kAvx512Vnni ? f.HasAvx512Vnni() : f.HasAvx512();
  return isa && block_size % 16 == 0 && head_dim % 16 == 0;
}

AttentionImpl BestAttentionImpl(int32_t block_size, int32_t head_dim) {
  for (AttentionImpl impl : {AttentionImpl::kAvx512Vnni, AttentionImpl::kAvx512}) {
    if (AttentionSupported(impl, block_size, head_dim)) return impl;
  }
  return AttentionImpl::kReference;
}

void WritePagedKv(const PagedKvLayer& kv, const float* k_src, const float* v_src,
                  int64_t src_stride, const int64_t* slot_mapping, int64_t token_begin,
                  int64_t token_end) {
  const int32_t hd = kv.head_dim;
  const int32_t bs = kv.block_size;
  DCHECK(KvDtypeSupported(kv.dtype, hd));
  for (int64_t i = token_begin; i < token_end; ++i) {
    const int64_t slot_id = slot_mapping[i];
    if (slot_id < 0) continue;
    const int64_t block = slot_id / bs;
    const int64_t slot = slot_id % bs;
    for (int32_t h = 0; h < kv.num_kv_heads; ++h) {
      WriteHead(kv.dtype, k_src + i * src_stride + h * hd, v_src + i * src_stride + h * hd, hd, bs,
                slot, kv.KTile(block, h), kv.VTile(block, h));
    }
  }
}

void PagedDecodeAttention(AttentionImpl impl, const float* q, const PagedKvLayer& kv,
                          const int32_t* block_table, int32_t context_len,
                          const AttentionParams& params, float* out) {
  CheckShapes(kv, params);
  DCHECK_GT(context_len, 0);
  const Impl fns = GetImpl(impl);
  for (int32_t h = params.kv_head_begin; h < params.kv_head_end; ++h) {
    AttendTokensWindowed(fns, q, 0, context_len - 1, 0, 1, kv, block_table, params, h, out, 0);
  }
}

void PagedPrefillAttention(AttentionImpl impl, const float* q, int64_t q_stride,
                           int32_t start_pos, int32_t q_begin, int32_t q_end,
                           const PagedKvLayer& kv, const int32_t* block_table,
                           const AttentionParams& params, float* out, int64_t out_stride) {
  CheckShapes(kv, params);
  DCHECK(0 <= start_pos && 0 <= q_begin && q_begin <= q_end);
  const Impl fns = GetImpl(impl);
  for (int32_t h = params.kv_head_begin; h < params.kv_head_end; ++h) {
    for (int32_t t0 = q_begin; t0 < q_end; t0 += kQueryTile) {
      const int32_t t1 = std::min(q_end, t0 + kQueryTile);
      AttendTokensWindowed(fns, q, q_stride, start_pos, t0, t1, kv, block_table, params, h, out,
                           out_stride);
    }
  }
}

}  // namespace weft::kernels

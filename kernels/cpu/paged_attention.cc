#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "glog/logging.h"
#include "kernels/cpu/paged_attention_avx512.h"

namespace weft::kernels {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Query tokens processed together by the prefill driver (they share each K/V block).
constexpr int32_t kQueryTile = 8;
constexpr int32_t kMaxRows = kQueryTile * kMaxQueriesPerKvHead;
constexpr int32_t kMaxBlockSize = 1024;

// Portable block step: separate multiply and add, sums in the documented order.
void AttendBlockReference(const AttentionBlockRows& rows) {
  const int32_t bs = rows.block_size;
  const int32_t hd = rows.head_dim;
  float s[kMaxBlockSize];
  for (int32_t r = 0; r < rows.num_rows; ++r) {
    const int32_t n = rows.num_valid[r];
    const float* q = rows.q[r];
    for (int32_t j = 0; j < n; ++j) s[j] = 0.0f;
    for (int32_t d = 0; d < hd; ++d) {
      const float qd = q[d];
      const float* kt = rows.kt + d * bs;
      for (int32_t j = 0; j < n; ++j) s[j] = s[j] + qd * kt[j];
    }
    float block_max = kNegInf;
    for (int32_t j = 0; j < n; ++j) {
      s[j] = s[j] * rows.scale;
      block_max = std::max(block_max, s[j]);
    }
    const float m_new = std::max(rows.m[r], block_max);
    const float alpha = std::exp(rows.m[r] - m_new);
    float sum = 0.0f;
    for (int32_t j = 0; j < n; ++j) {
      s[j] = std::exp(s[j] - m_new);
      sum = sum + s[j];
    }
    rows.l[r] = rows.l[r] * alpha + sum;
    rows.m[r] = m_new;
    float* acc = rows.acc[r];
    for (int32_t d = 0; d < hd; ++d) acc[d] = acc[d] * alpha;
    for (int32_t j = 0; j < n; ++j) {
      const float p = s[j];
      const float* v = rows.v + j * hd;
      for (int32_t d = 0; d < hd; ++d) acc[d] = acc[d] + p * v[d];
    }
  }
}

using AttendBlockFn = void (*)(const AttentionBlockRows&);

AttendBlockFn GetAttendBlock(AttentionImpl impl) {
  return impl == AttentionImpl::kAvx512 ? &avx512::AttendBlock : &AttendBlockReference;
}

bool CpuHasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  return has;
}

// Query tokens [t_begin, t_end) at positions start_pos + t against kv head `h`: every
// query head of the group, block by block. Writes the group's output rows.
void AttendTokens(AttendBlockFn attend, const float* q, int64_t q_stride, int32_t start_pos,
                  int32_t t_begin, int32_t t_end, const PagedKvLayer& kv,
                  const int32_t* block_table, const AttentionParams& params, int32_t h,
                  float* out, int64_t out_stride) {
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
  // Token t sees keys [0, start_pos + t]; later tokens see more, so the rows still
  // active in block b are a suffix of the tile.
  const int32_t last_ctx = start_pos + t_end;
  const int32_t num_blocks = (last_ctx + bs - 1) / bs;
  for (int32_t b = 0; b < num_blocks; ++b) {
    const int32_t first_t = std::max(t_begin, b * bs - start_pos);
    const int32_t first_row = (first_t - t_begin) * group;
    for (int32_t t = first_t; t < t_end; ++t) {
      const int32_t n = std::min(bs, start_pos + t + 1 - b * bs);
      for (int32_t g = 0; g < group; ++g) num_valid[(t - t_begin) * group + g] = n;
    }
    const int64_t block_offset = block_table[b] * kv.block_stride + h * kv.head_stride;
    AttentionBlockRows rows;
    rows.kt = kv.k + block_offset;
    rows.v = kv.v + block_offset;
    rows.block_size = bs;
    rows.head_dim = hd;
    rows.scale = params.scale;
    rows.num_rows = num_rows - first_row;
    rows.q = q_rows + first_row;
    rows.num_valid = num_valid + first_row;
    rows.m = m + first_row;
    rows.l = l + first_row;
    rows.acc = acc_rows + first_row;
    attend(rows);
  }
  for (int32_t r = 0; r < num_rows; ++r) {
    for (int32_t d = 0; d < hd; ++d) acc_rows[r][d] = acc_rows[r][d] / l[r];
  }
}

void CheckShapes(const PagedKvLayer& kv, const AttentionParams& params) {
  DCHECK_GT(kv.num_kv_heads, 0);
  DCHECK_EQ(params.num_heads % kv.num_kv_heads, 0);
  DCHECK_LE(params.num_heads / kv.num_kv_heads, kMaxQueriesPerKvHead);
  DCHECK(kv.block_size > 0 && kv.block_size <= kMaxBlockSize);
  DCHECK(0 <= params.kv_head_begin && params.kv_head_begin <= params.kv_head_end &&
         params.kv_head_end <= kv.num_kv_heads);
  DCHECK(params.group_end < 0 || (0 <= params.group_begin && params.group_begin < params.group_end &&
                                  params.group_end <= params.num_heads / kv.num_kv_heads));
}

}  // namespace

const char* AttentionImplName(AttentionImpl impl) {
  return impl == AttentionImpl::kAvx512 ? "avx512" : "reference";
}

bool AttentionSupported(AttentionImpl impl, int32_t block_size, int32_t head_dim) {
  if (block_size <= 0 || block_size > kMaxBlockSize || head_dim <= 0) return false;
  if (impl == AttentionImpl::kReference) return true;
  return CpuHasAvx512() && block_size % 16 == 0 && head_dim % 16 == 0;
}

AttentionImpl BestAttentionImpl(int32_t block_size, int32_t head_dim) {
  return AttentionSupported(AttentionImpl::kAvx512, block_size, head_dim)
             ? AttentionImpl::kAvx512
             : AttentionImpl::kReference;
}

void WritePagedKv(const PagedKvLayer& kv, const float* k_src, const float* v_src,
                  int64_t src_stride, const int64_t* slot_mapping, int64_t token_begin,
                  int64_t token_end) {
  const int32_t hd = kv.head_dim;
  const int32_t bs = kv.block_size;
  for (int64_t i = token_begin; i < token_end; ++i) {
    const int64_t slot_id = slot_mapping[i];
    if (slot_id < 0) continue;
    const int64_t block = slot_id / bs;
    const int64_t slot = slot_id % bs;
    for (int32_t h = 0; h < kv.num_kv_heads; ++h) {
      const int64_t base = block * kv.block_stride + h * kv.head_stride;
      const float* ks = k_src + i * src_stride + h * hd;
      float* kt = kv.k + base + slot;
      for (int32_t d = 0; d < hd; ++d) kt[d * bs] = ks[d];
      std::memcpy(kv.v + base + slot * hd, v_src + i * src_stride + h * hd,
                  hd * sizeof(float));
    }
  }
}

void PagedDecodeAttention(AttentionImpl impl, const float* q, const PagedKvLayer& kv,
                          const int32_t* block_table, int32_t context_len,
                          const AttentionParams& params, float* out) {
  CheckShapes(kv, params);
  DCHECK_GT(context_len, 0);
  const AttendBlockFn attend = GetAttendBlock(impl);
  for (int32_t h = params.kv_head_begin; h < params.kv_head_end; ++h) {
    AttendTokens(attend, q, 0, context_len - 1, 0, 1, kv, block_table, params, h, out, 0);
  }
}

void PagedPrefillAttention(AttentionImpl impl, const float* q, int64_t q_stride,
                           int32_t start_pos, int32_t q_begin, int32_t q_end,
                           const PagedKvLayer& kv, const int32_t* block_table,
                           const AttentionParams& params, float* out, int64_t out_stride) {
  CheckShapes(kv, params);
  DCHECK(0 <= start_pos && 0 <= q_begin && q_begin <= q_end);
  const AttendBlockFn attend = GetAttendBlock(impl);
  for (int32_t h = params.kv_head_begin; h < params.kv_head_end; ++h) {
    for (int32_t t0 = q_begin; t0 < q_end; t0 += kQueryTile) {
      const int32_t t1 = std::min(q_end, t0 + kQueryTile);
      AttendTokens(attend, q, q_stride, start_pos, t0, t1, kv, block_table, params, h, out,
                   out_stride);
    }
  }
}

}  // namespace weft::kernels

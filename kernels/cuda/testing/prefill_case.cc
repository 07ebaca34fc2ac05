#include "kernels/cuda/testing/prefill_case.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "common/ggml_types.h"
#include "gtest/gtest.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cuda/testing/kv_reference.h"

namespace weft::kernels::cuda::testing {

void CheckPrefill(const PrefillShape& shape,
                  const std::vector<std::pair<int32_t, int32_t>>& chunks, uint32_t seed,
                  const PrefillKernelUnderTest& k) {
  SCOPED_TRACE(::testing::Message() << KvDtypeName(shape.dtype) << " hd " << shape.head_dim
                                    << " group " << shape.group << " bs " << shape.block_size
                                    << " window " << shape.window);
  std::mt19937 rng(seed);
  std::normal_distribution<float> val(0.0f, 1.0f);
  const int32_t bs = shape.block_size;
  int32_t needed = 0;
  for (const auto& [start, n] : chunks) needed += (start + n + bs - 1) / bs;
  const int32_t num_blocks = needed + 2;
  HostPagedKv host(shape.dtype, num_blocks, bs, shape.num_kv_heads, shape.head_dim);
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> tables, offsets, q_start, start_pos, num_tokens;
  const int32_t kvw = shape.num_kv_heads * shape.head_dim;
  size_t next = 0;
  int32_t rows = 0;
  for (const auto& [start, n] : chunks) {
    offsets.push_back(static_cast<int32_t>(tables.size()));
    for (int32_t b = 0; b < (start + n + bs - 1) / bs; ++b) tables.push_back(ids[next++]);
    std::vector<float> kr(kvw), vr(kvw);
    for (int32_t p = 0; p < start + n; ++p) {
      for (float& x : kr) x = val(rng);
      for (float& x : vr) x = val(rng);
      host.Write(kr.data(), vr.data(), int64_t{tables[offsets.back() + p / bs]} * bs + p % bs);
    }
    q_start.push_back(rows);
    start_pos.push_back(start);
    num_tokens.push_back(n);
    rows += n;
  }
  std::vector<float> cpu_pool;
  PagedKvLayer cpu_kv;
  host.CpuPool(&cpu_pool, &cpu_kv);
  if (host.scales().empty()) host.scales().resize(8);

  const int32_t heads = shape.num_kv_heads * shape.group;
  const int32_t qw = heads * shape.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  std::vector<float> q(static_cast<size_t>(rows) * qw);
  for (float& x : q) x = val(rng);
  std::vector<float> q_ref = q;
  if (k.rounds_q) {
    constexpr float kLog2e = 1.4426950408889634f;
    const float qs = scale * kLog2e;
    for (size_t i = 0; i < q.size(); ++i) {
      const float x = q[i] * qs;
      q_ref[i] = (shape.dtype == KvDtype::kBf16 ? Bf16ToFp32(Fp32ToBf16(x))
                                                : Fp16ToFp32(Fp32ToFp16(x))) /
                 qs;
    }
  }
  AttentionParams cp;
  cp.num_heads = heads;
  cp.scale = scale;
  cp.kv_head_begin = 0;
  cp.kv_head_end = shape.num_kv_heads;
  cp.window = shape.window;
  std::vector<float> want(q.size());
  for (size_t s = 0; s < chunks.size(); ++s) {
    ::weft::kernels::PagedPrefillAttention(
        AttentionImpl::kReference, q_ref.data() + int64_t{q_start[s]} * qw, qw, start_pos[s], 0,
        num_tokens[s], cpu_kv, tables.data() + offsets[s], cp,
        want.data() + int64_t{q_start[s]} * qw, qw);
  }

  std::vector<int32_t> tile_seq, tile_q;
  BuildPrefillTiles(num_tokens.data(), static_cast<int32_t>(chunks.size()), k.tile_tokens(shape),
                    &tile_seq, &tile_q);
  std::vector<float> out(q.size(), 7.0f);
  PrefillAttentionArgs a;
  a.q = q.data();
  a.q_stride = qw;
  a.out = out.data();
  a.out_stride = qw;
  a.out_dtype = ActDtype::kF32;
  a.seq_q_start = q_start.data();
  a.seq_start_pos = start_pos.data();
  a.seq_num_tokens = num_tokens.data();
  a.block_tables = tables.data();
  a.block_table_offsets = offsets.data();
  a.tile_seq = tile_seq.data();
  a.tile_q_begin = tile_q.data();
  a.num_tiles = static_cast<int32_t>(tile_seq.size());
  a.num_heads = heads;
  a.scale = scale;
  a.window = shape.window;
  const PagedKvView kv = host.View(host.data().data(), host.scales().data());
  k.launch(a, kv);
  const double tol = k.tolerance(shape);
  for (size_t e = 0; e < want.size(); ++e) {
    ASSERT_NEAR(out[e], want[e], tol + 2 * tol * std::fabs(want[e]))
        << "row " << e / qw << " head " << (e % qw) / shape.head_dim << " dim "
        << e % shape.head_dim;
  }
}

}  // namespace weft::kernels::cuda::testing

#include "kernels/cuda/testing/decode_case.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "common/ggml_types.h"
#include "gtest/gtest.h"
#include "kernels/cpu/paged_attention.h"

namespace weft::kernels::cuda::testing {

void SharedWorkspace::Reserve(int64_t floats, int64_t num_counters) {
  if (static_cast<int64_t>(ws.size()) < floats) {
    ws.assign(static_cast<size_t>(floats), std::numeric_limits<float>::quiet_NaN());
  }
  if (static_cast<int64_t>(counters.size()) < num_counters) {
    counters.assign(static_cast<size_t>(num_counters), 0);
  }
}

std::unique_ptr<DecodeCase> MakeDecodeCase(const CaseShape& shape,
                                           const std::vector<int32_t>& lengths,
                                           const std::vector<int32_t>& contexts, uint32_t seed,
                                           bool round_q) {
  auto c = std::make_unique<DecodeCase>();
  c->shape = shape;
  c->contexts = contexts;
  std::mt19937 rng(seed);
  std::normal_distribution<float> val(0.0f, 1.0f);
  const int32_t bs = shape.block_size;
  int32_t needed = 0;
  for (int32_t len : lengths) needed += (len + bs - 1) / bs;
  const int32_t num_blocks = needed + 2;
  c->host = std::make_unique<HostPagedKv>(shape.dtype, num_blocks, bs, shape.num_kv_heads,
                                          shape.head_dim);
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  const int32_t kvw = shape.num_kv_heads * shape.head_dim;
  size_t next = 0;
  for (int32_t len : lengths) {
    c->offsets.push_back(static_cast<int32_t>(c->tables.size()));
    for (int32_t b = 0; b < (len + bs - 1) / bs; ++b) c->tables.push_back(ids[next++]);
    std::vector<float> k(kvw), v(kvw);
    for (int32_t p = 0; p < len; ++p) {
      for (float& x : k) x = val(rng);
      for (float& x : v) x = val(rng);
      c->host->Write(k.data(), v.data(),
                     int64_t{c->tables[c->offsets.back() + p / bs]} * bs + p % bs);
    }
  }
  std::vector<float> cpu_pool;
  PagedKvLayer cpu_kv;
  c->host->CpuPool(&cpu_pool, &cpu_kv);
  if (c->host->scales().empty()) c->host->scales().resize(8);

  c->items = static_cast<int32_t>(lengths.size());
  c->heads = shape.num_kv_heads * shape.group;
  c->qw = c->heads * shape.head_dim;
  c->scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  // q rows 16-byte aligned, with a row stride wider than the heads (as in the QKV buffer).
  c->q_stride = c->qw + 8;
  c->q.resize(static_cast<size_t>(c->items) * c->q_stride + 4);
  c->q0 = c->q.data() + ((16 - reinterpret_cast<uintptr_t>(c->q.data()) % 16) % 16) / 4;
  for (int32_t i = 0; i < c->items * c->q_stride; ++i) c->q0[i] = val(rng);
  std::vector<float> q_ref(c->q0, c->q0 + int64_t{c->items} * c->q_stride);
  if (round_q) {
    constexpr float kLog2e = 1.4426950408889634f;
    const float qs = c->scale * kLog2e;
    for (float& x : q_ref) {
      const float y = x * qs;
      x = (shape.dtype == KvDtype::kBf16 ? Bf16ToFp32(Fp32ToBf16(y)) : Fp16ToFp32(Fp32ToFp16(y))) /
          qs;
    }
  }

  c->want.assign(static_cast<size_t>(c->items) * c->qw, 0.0f);
  AttentionParams cp;
  cp.num_heads = c->heads;
  cp.scale = c->scale;
  cp.kv_head_begin = 0;
  cp.kv_head_end = shape.num_kv_heads;
  cp.window = shape.window;
  for (int32_t i = 0; i < c->items; ++i) {
    if (contexts[i] == 0) continue;
    ::weft::kernels::PagedDecodeAttention(
        AttentionImpl::kReference, q_ref.data() + int64_t{i} * c->q_stride, cpu_kv,
        c->tables.data() + c->offsets[i], contexts[i], cp, c->want.data() + int64_t{i} * c->qw);
  }
  return c;
}

void RunDecodeCase(const DecodeCase& c, int32_t partition, int32_t max_splits,
                   SharedWorkspace* shared, int runs, const DecodeKernelUnderTest& k,
                   int32_t device_min_partition) {
  SCOPED_TRACE(::testing::Message()
               << KvDtypeName(c.shape.dtype) << " hd " << c.shape.head_dim << " group "
               << c.shape.group << " window " << c.shape.window << " items " << c.items
               << " partition " << partition << " max_splits " << max_splits
               << " device_min_partition " << device_min_partition);
  const double tol = k.tolerance ? k.tolerance(c.shape) : 0.0;
  const double abs_tol = k.tolerance ? tol : 2e-5, rel_tol = k.tolerance ? 2 * tol : 2e-4;
  DecodeAttentionArgs a;
  a.q = c.q0;
  a.q_stride = c.q_stride;
  std::vector<float> out(c.want.size(), 7.0f);
  a.out = out.data();
  a.out_stride = c.qw;
  a.out_dtype = ActDtype::kF32;
  a.context_lens = c.contexts.data();
  a.block_tables = c.tables.data();
  a.block_table_offsets = c.offsets.data();
  a.num_items = c.items;
  a.num_heads = c.heads;
  a.scale = c.scale;
  a.window = c.shape.window;
  a.partition_size = partition;
  a.max_splits = max_splits;
  a.device_min_partition = device_min_partition;
  a.kernel = k.kernel;
  const int64_t ws_floats =
      DecodeWorkspaceFloats(c.items, c.heads, c.shape.head_dim, a.max_splits);
  shared->Reserve(ws_floats, DecodeSplitCounters(c.items, c.shape.num_kv_heads));
  a.workspace = shared->ws.data();
  a.split_counters = shared->counters.data();
  const PagedKvView kv = c.host->View(c.host->data().data(), c.host->scales().data());
  // Odd runs address q and out through q_rows: item i at row items - 1 - i (the backend's
  // mixed batches place decode rows among prefill rows so).
  std::vector<int32_t> reversed(c.items);
  std::vector<float> q_buf(static_cast<size_t>(c.items) * c.q_stride + 4);
  float* q_rev = q_buf.data() + ((16 - reinterpret_cast<uintptr_t>(q_buf.data()) % 16) % 16) / 4;
  for (int32_t i = 0; i < c.items; ++i) {
    reversed[i] = c.items - 1 - i;
    std::copy(c.q0 + int64_t{i} * c.q_stride, c.q0 + int64_t{i + 1} * c.q_stride,
              q_rev + int64_t{reversed[i]} * c.q_stride);
  }
  for (int run = 0; run < runs; ++run) {  // on one workspace, as graph replays do
    const bool rev = run % 2 == 1;
    a.q = rev ? q_rev : c.q0;
    a.q_rows = rev ? reversed.data() : nullptr;
    std::fill(out.begin(), out.end(), 7.0f);
    k.launch(a, kv);
    for (size_t e = 0; e < c.want.size(); ++e) {
      const int64_t item = static_cast<int64_t>(e) / c.qw;
      const size_t at = rev ? (c.items - 1 - item) * c.qw + e % c.qw : e;
      ASSERT_NEAR(out[at], c.want[e], abs_tol + rel_tol * std::fabs(c.want[e]))
          << "run " << run << (rev ? " (q_rows reversed)" : "") << " item " << item << " head "
          << (e % c.qw) / c.shape.head_dim << " dim " << e % c.shape.head_dim;
    }
    for (size_t i = 0; i < shared->counters.size(); ++i) {
      ASSERT_EQ(shared->counters[i], 0) << "split counter " << i;
    }
  }
}

void CheckDecodeFresh(const CaseShape& shape, const std::vector<int32_t>& lengths,
                      const std::vector<int32_t>& contexts, int32_t partition, uint32_t seed,
                      const DecodeKernelUnderTest& k) {
  const std::unique_ptr<DecodeCase> c =
      MakeDecodeCase(shape, lengths, contexts, seed, k.rounds_q && k.rounds_q(shape));
  const int32_t max_ctx = *std::max_element(contexts.begin(), contexts.end());
  SharedWorkspace fresh;
  RunDecodeCase(*c, partition, DecodeNumSplits(std::max(max_ctx, 1), partition) + 1, &fresh, 2,
                k);
}

void RunDecodeSequence(const std::vector<DecodeStep>& steps, const DecodeKernelUnderTest& k) {
  SharedWorkspace shared;
  for (size_t i = 0; i < steps.size(); ++i) {
    const DecodeStep& s = steps[i];
    SCOPED_TRACE(::testing::Message() << "step " << i);
    std::vector<int32_t> lengths;
    for (int32_t ctx : s.contexts) lengths.push_back(ctx > 0 ? ctx : 5);
    const std::unique_ptr<DecodeCase> c =
        MakeDecodeCase(s.shape, lengths, s.contexts, 100 + static_cast<uint32_t>(i),
                       k.rounds_q && k.rounds_q(s.shape));
    RunDecodeCase(*c, s.partition, DecodeNumSplits(s.plan_context, s.partition), &shared, 1,
                  k);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

void CheckDeviceSplits(const CaseShape& shape, const std::vector<int32_t>& contexts,
                       int32_t max_splits, int32_t min_partition,
                       const std::vector<int32_t>& want_splits, uint32_t seed,
                       const DecodeKernelUnderTest& k) {
  std::vector<int32_t> lengths;
  for (int32_t ctx : contexts) lengths.push_back(ctx > 0 ? ctx : 5);
  const std::unique_ptr<DecodeCase> c =
      MakeDecodeCase(shape, lengths, contexts, seed, k.rounds_q && k.rounds_q(shape));
  SharedWorkspace fresh;  // NaNs: a log-sum-exp slot is finite only once a split wrote it
  // The host's partition (a bucket's, far longer than these contexts) is ignored.
  RunDecodeCase(*c, 1 << 20, max_splits, &fresh, 2, k, min_partition);
  const int64_t lse0 = int64_t{c->items} * c->heads * max_splits * shape.head_dim;
  for (int32_t i = 0; i < c->items; ++i) {
    for (int32_t head = 0; head < c->heads; ++head) {
      int32_t written = 0;
      for (int32_t p = 0; p < max_splits; ++p) {
        const float lse = fresh.ws[lse0 + (int64_t{i} * c->heads + head) * max_splits + p];
        if (!std::isnan(lse)) ++written;
      }
      EXPECT_EQ(written, want_splits[i]) << "item " << i << " head " << head;
    }
  }
}

std::vector<DecodeStep> DefaultModelSteps(KvDtype dtype) {
  const CaseShape m{3, 3, 64, 16, dtype};
  const std::vector<int32_t> four(4, 300), one(1, 300);
  return {
      {m, four, 64, 300},                                   // 4 items x 5 splits
      {m, one, 64, 300},                                    // shrink: 1 item x 5 splits
      {m, four, 64, 300},                                   // and back up
      {m, {300, 0, 17, 1000, 64, 129, 0, 256}, 128, 1024},  // graph bucket 8, 8 splits
      {m, one, 64, 300},                                    // shrink again
      {m, {40, 33}, 64, 40},                                // one split: no combining
      {m, {1000}, 64, 1000},                                // 1 item x 16 splits
      {m, {300, 0}, 128, 1024},                             // graph bucket 2
      {m, four, 64, 300},
  };
}

std::vector<DecodeStep> MixedShapeSteps() {
  const CaseShape mha{2, 1, 128, 16, KvDtype::kBf16};
  const CaseShape g8{1, 8, 64, 16, KvDtype::kF16};
  const CaseShape g4{2, 4, 128, 7, KvDtype::kInt8};
  return {
      {g8, {200, 150, 90}, 32, 200},  // 3 items x 7 splits
      {mha, {100}, 32, 100},          // shrink
      {g4, {70, 0, 45}, 32, 128},     // graph-like padding and a spare split
      {g8, {200}, 32, 200},
      {mha, {100, 100, 100, 100}, 32, 128},
      {g4, {70}, 64, 70},
  };
}

}  // namespace weft::kernels::cuda::testing

// The pipelined decode attention kernel's own source (decode_attention_pipelined.cu)
// run on the CPU by the host emulation (testing/host_emulation.h) against the CPU
// reference (kernels/cpu/paged_attention.h) — no GPU needed: its index arithmetic, tile
// pipeline bookkeeping, masking, token-lane merge, int8 dequantization and the
// last-CTA combination of splits (counters back at zero after every launch) are
// executed here. Timing, memory ordering and bank conflicts are not (the GPU test
// paged_attention_test covers the real thing).
#define WEFT_CUDA_HOST_EMULATION 1
#include "kernels/cuda/testing/host_emulation.h"
// The kernel under test, textually (its launch code is compiled out).
#include "kernels/cuda/decode_attention_pipelined.cu"

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cuda/testing/kv_reference.h"

namespace weft::kernels::cuda {
namespace {

struct Shape {
  int32_t num_kv_heads, group, head_dim, block_size;
  KvDtype dtype;
};

// Emulated launch of the kernel instance the real launcher would pick.
struct EmuLauncher {
  const DecodeAttentionArgs& a;
  const PagedKvView& kv;
  int group;

  template <typename KvT, int kHeadDim, int kGroup>
  cudaError_t Run() const {
    using C = Cfg<KvT, kHeadDim, kGroup>;
    EmulateLaunch(dim3(kv.num_kv_heads, a.num_items, a.max_splits), dim3(C::kThreads),
                  C::kSmemBytes, [&] { PipelinedDecodeKernel<KvT, kHeadDim, kGroup>(a, kv); });
    return cudaSuccess;
  }
  template <typename KvT, int kHeadDim>
  cudaError_t operator()() const {
    if (group <= 1) return Run<KvT, kHeadDim, 1>();
    if (group <= 2) return Run<KvT, kHeadDim, 2>();
    if (group <= 4) return Run<KvT, kHeadDim, 4>();
    if (group <= 8) return Run<KvT, kHeadDim, 8>();
    if (group <= 16) return Run<KvT, kHeadDim, 16>();
    return Run<KvT, kHeadDim, 32>();
  }
};

// The decode workspace as the CUDA backend's ModelRunner keeps it: one buffer for every
// plan, grown (and zeroed) only when a plan needs more than it holds.
struct SharedWorkspace {
  std::vector<float> ws;
  void Reserve(int64_t floats) {
    if (static_cast<int64_t>(ws.size()) < floats) ws.assign(static_cast<size_t>(floats), 0.0f);
  }
};

// One decode batch: sequences of the given lengths through shuffled block tables, item i
// decoding at context contexts[i] (<= its length; 0: graph padding), with the CPU
// reference's output.
struct DecodeCase {
  Shape shape;
  std::vector<int32_t> contexts, tables, offsets;
  std::unique_ptr<testing::HostPagedKv> host;
  std::vector<float> q;  // 16-byte aligned rows at q0, q_stride apart
  float* q0 = nullptr;
  int32_t q_stride = 0, items = 0, heads = 0, qw = 0;
  float scale = 1.0f;
  std::vector<float> want;
};

std::unique_ptr<DecodeCase> MakeCase(const Shape& shape, const std::vector<int32_t>& lengths,
                                     const std::vector<int32_t>& contexts, uint32_t seed) {
  auto c = std::make_unique<DecodeCase>();
  c->shape = shape;
  c->contexts = contexts;
  std::mt19937 rng(seed);
  std::normal_distribution<float> val(0.0f, 1.0f);
  const int32_t bs = shape.block_size;
  int32_t needed = 0;
  for (int32_t len : lengths) needed += (len + bs - 1) / bs;
  const int32_t num_blocks = needed + 2;
  c->host = std::make_unique<testing::HostPagedKv>(shape.dtype, num_blocks, bs,
                                                   shape.num_kv_heads, shape.head_dim);
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

  c->want.assign(static_cast<size_t>(c->items) * c->qw, 0.0f);
  AttentionParams cp;
  cp.num_heads = c->heads;
  cp.scale = c->scale;
  cp.kv_head_begin = 0;
  cp.kv_head_end = shape.num_kv_heads;
  for (int32_t i = 0; i < c->items; ++i) {
    if (contexts[i] == 0) continue;
    ::weft::kernels::PagedDecodeAttention(
        AttentionImpl::kReference, c->q0 + int64_t{i} * c->q_stride, cpu_kv,
        c->tables.data() + c->offsets[i], contexts[i], cp, c->want.data() + int64_t{i} * c->qw);
  }
  return c;
}

// Runs the kernel on `c` with splits of `partition` tokens and a grid of `max_splits`
// (the plan), on the workspace `shared` reserves, `runs` times; every run's output must
// match the reference and leave the split counters zero.
void RunCase(const DecodeCase& c, int32_t partition, int32_t max_splits, SharedWorkspace* shared,
             int runs) {
  SCOPED_TRACE(::testing::Message()
               << KvDtypeName(c.shape.dtype) << " hd " << c.shape.head_dim << " group "
               << c.shape.group << " items " << c.items << " partition " << partition
               << " max_splits " << max_splits);
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
  a.partition_size = partition;
  a.max_splits = max_splits;
  const int64_t ws_floats =
      DecodeWorkspaceFloats(c.items, c.heads, c.shape.head_dim, a.max_splits);
  shared->Reserve(ws_floats);
  a.workspace = shared->ws.data();
  const PagedKvView kv = c.host->View(c.host->data().data(), c.host->scales().data());
  for (int run = 0; run < runs; ++run) {  // on one workspace, as graph replays do
    std::fill(out.begin(), out.end(), 7.0f);
    ASSERT_EQ(DispatchKv(kv.dtype, kv.head_dim, EmuLauncher{a, kv, c.shape.group}), cudaSuccess);
    for (size_t e = 0; e < c.want.size(); ++e) {
      ASSERT_NEAR(out[e], c.want[e], 2e-5 + 2e-4 * std::fabs(c.want[e]))
          << "run " << run << " item " << e / c.qw << " head " << (e % c.qw) / c.shape.head_dim
          << " dim " << e % c.shape.head_dim;
    }
    const int64_t counters = int64_t{c.items} * c.heads;
    for (int64_t i = 0; i < counters; ++i) {
      int32_t n;
      std::memcpy(&n, &shared->ws[ws_floats - counters + i], 4);
      ASSERT_EQ(n, 0) << "split counter " << i;
    }
  }
}

// A fresh zeroed workspace for one case, launched twice with a spare split.
void Check(const Shape& shape, const std::vector<int32_t>& lengths,
           const std::vector<int32_t>& contexts, int32_t partition, uint32_t seed) {
  const std::unique_ptr<DecodeCase> c = MakeCase(shape, lengths, contexts, seed);
  const int32_t max_ctx = *std::max_element(contexts.begin(), contexts.end());
  SharedWorkspace fresh;
  RunCase(*c, partition, DecodeNumSplits(std::max(max_ctx, 1), partition) + 1, &fresh, 2);
}

TEST(EmulatedDecodeAttentionTest, OneSplitAndSeveral) {
  // Llama-8B's GQA 4 at head_dim 128 (bdz 2) with contexts inside, on and past tile edges.
  const Shape s{2, 4, 128, 16, KvDtype::kBf16};
  const std::vector<int32_t> lens = {1, 31, 32, 33, 100, 250};
  Check(s, lens, lens, 256, 1);  // one split each
  Check(s, lens, lens, 64, 2);   // up to 4 splits: the last CTA combines
  Check(s, lens, lens, 7, 3);    // splits shorter than a tile
}

TEST(EmulatedDecodeAttentionTest, EveryKvTypeAndHeadSize) {
  const std::vector<int32_t> lens = {3, 40, 129};
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kBf16, KvDtype::kInt8}) {
    Check({3, 3, 64, 16, dt}, lens, lens, 48, 4);  // the default model's shape (group 3 -> 4)
    Check({1, 1, 128, 16, dt}, lens, lens, 96, 5);  // MHA: 8 token lanes
    Check({2, 8, 64, 16, dt}, lens, lens, 1000, 6);
  }
}

TEST(EmulatedDecodeAttentionTest, LargeGroupsOddBlocksAndPadding) {
  Check({1, 16, 128, 16, KvDtype::kBf16}, {70, 5}, {70, 5}, 32, 7);  // 256 threads
  Check({1, 32, 64, 16, KvDtype::kInt8}, {45}, {45}, 64, 8);         // 256 threads, bdz 1
  Check({2, 3, 128, 7, KvDtype::kInt8}, {6, 7, 8, 50}, {6, 7, 8, 50}, 32, 9);  // block size 7
  // Item 1 is graph padding (context 0): zeros; item 2 decodes short of its length.
  Check({2, 4, 64, 16, KvDtype::kF16}, {20, 16, 90}, {20, 0, 61}, 32, 10);
}

// One step of a serving sequence: a decode batch and the plan it runs with. The plan's
// grid covers plan_context tokens (a CUDA graph's context bucket, or the batch's longest
// context when run eagerly).
struct Step {
  Shape shape;
  std::vector<int32_t> contexts;  // 0: graph padding
  int32_t partition;
  int32_t plan_context;
};

// Runs the steps in order on ONE workspace, as the ModelRunner does for every plan of
// its life (grown and zeroed only when too small): each step's output is checked.
void RunSequence(const std::vector<Step>& steps) {
  SharedWorkspace shared;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    SCOPED_TRACE(::testing::Message() << "step " << i);
    std::vector<int32_t> lengths;
    for (int32_t ctx : s.contexts) lengths.push_back(ctx > 0 ? ctx : 5);
    const std::unique_ptr<DecodeCase> c =
        MakeCase(s.shape, lengths, s.contexts, 100 + static_cast<uint32_t>(i));
    RunCase(*c, s.partition, DecodeNumSplits(s.plan_context, s.partition), &shared, 1);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// The default model's shape (3 KV heads, group 3, head_dim 64): batches growing and
// shrinking, eager plans and graph-bucket plans (context bucket 1024), one split and many.
TEST(EmulatedDecodeAttentionTest, PlansOfDifferentShapesShareOneWorkspace) {
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kInt8}) {
    const Shape m{3, 3, 64, 16, dt};
    const std::vector<int32_t> four(4, 300), one(1, 300);
    RunSequence({
        {m, four, 64, 300},                                  // 4 items x 5 splits
        {m, one, 64, 300},                                   // shrink: 1 item x 5 splits
        {m, four, 64, 300},                                  // and back up
        {m, {300, 0, 17, 1000, 64, 129, 0, 256}, 128, 1024},  // graph bucket 8, 8 splits
        {m, one, 64, 300},                                   // shrink again
        {m, {40, 33}, 64, 40},                               // one split: no combining
        {m, {1000}, 64, 1000},                               // 1 item x 16 splits
        {m, {300, 0}, 128, 1024},                            // graph bucket 2
        {m, four, 64, 300},
    });
  }
}

// Other group sizes, head sizes and KV types on one workspace (larger, then smaller, and
// back), so that no layout can survive by the accident of one model's numbers.
TEST(EmulatedDecodeAttentionTest, ShapesAndKvTypesShareOneWorkspace) {
  const Shape mha{2, 1, 128, 16, KvDtype::kBf16};
  const Shape g8{1, 8, 64, 16, KvDtype::kF16};
  const Shape g4{2, 4, 128, 7, KvDtype::kInt8};
  RunSequence({
      {g8, {200, 150, 90}, 32, 200},   // 3 items x 7 splits
      {mha, {100}, 32, 100},           // shrink
      {g4, {70, 0, 45}, 32, 128},      // graph-like padding and a spare split
      {g8, {200}, 32, 200},
      {mha, {100, 100, 100, 100}, 32, 128},
      {g4, {70}, 64, 70},
  });
}

}  // namespace
}  // namespace weft::kernels::cuda

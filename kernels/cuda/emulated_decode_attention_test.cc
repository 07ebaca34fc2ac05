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

// Sequences of the given lengths through shuffled block tables; item i decodes at
// context contexts[i] (<= its length; 0: graph padding).
void Check(const Shape& shape, const std::vector<int32_t>& lengths,
           const std::vector<int32_t>& contexts, int32_t partition, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << KvDtypeName(shape.dtype) << " hd " << shape.head_dim
                                    << " group " << shape.group << " partition " << partition);
  std::mt19937 rng(seed);
  std::normal_distribution<float> val(0.0f, 1.0f);
  const int32_t bs = shape.block_size;
  int32_t needed = 0;
  for (int32_t len : lengths) needed += (len + bs - 1) / bs;
  const int32_t num_blocks = needed + 2;
  testing::HostPagedKv host(shape.dtype, num_blocks, bs, shape.num_kv_heads, shape.head_dim);
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> tables, offsets;
  const int32_t kvw = shape.num_kv_heads * shape.head_dim;
  size_t next = 0;
  for (int32_t len : lengths) {
    offsets.push_back(static_cast<int32_t>(tables.size()));
    for (int32_t b = 0; b < (len + bs - 1) / bs; ++b) tables.push_back(ids[next++]);
    std::vector<float> k(kvw), v(kvw);
    for (int32_t p = 0; p < len; ++p) {
      for (float& x : k) x = val(rng);
      for (float& x : v) x = val(rng);
      host.Write(k.data(), v.data(), int64_t{tables[offsets.back() + p / bs]} * bs + p % bs);
    }
  }
  std::vector<float> cpu_pool;
  PagedKvLayer cpu_kv;
  host.CpuPool(&cpu_pool, &cpu_kv);
  if (host.scales().empty()) host.scales().resize(8);

  const int32_t items = static_cast<int32_t>(lengths.size());
  const int32_t heads = shape.num_kv_heads * shape.group;
  const int32_t qw = heads * shape.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  // q rows 16-byte aligned, with a row stride wider than the heads (as in the QKV buffer).
  const int32_t q_stride = qw + 8;
  std::vector<float, std::allocator<float>> q(static_cast<size_t>(items) * q_stride + 4);
  float* q0 = q.data() + ((16 - reinterpret_cast<uintptr_t>(q.data()) % 16) % 16) / 4;
  for (int32_t i = 0; i < items * q_stride; ++i) q0[i] = val(rng);

  std::vector<float> want(static_cast<size_t>(items) * qw, 0.0f);
  AttentionParams cp;
  cp.num_heads = heads;
  cp.scale = scale;
  cp.kv_head_begin = 0;
  cp.kv_head_end = shape.num_kv_heads;
  for (int32_t i = 0; i < items; ++i) {
    if (contexts[i] == 0) continue;
    ::weft::kernels::PagedDecodeAttention(AttentionImpl::kReference, q0 + int64_t{i} * q_stride,
                                          cpu_kv, tables.data() + offsets[i], contexts[i], cp,
                                          want.data() + int64_t{i} * qw);
  }

  const int32_t max_ctx = *std::max_element(contexts.begin(), contexts.end());
  DecodeAttentionArgs a;
  a.q = q0;
  a.q_stride = q_stride;
  std::vector<float> out(want.size(), 7.0f);
  a.out = out.data();
  a.out_stride = qw;
  a.out_dtype = ActDtype::kF32;
  a.context_lens = contexts.data();
  a.block_tables = tables.data();
  a.block_table_offsets = offsets.data();
  a.num_items = items;
  a.num_heads = heads;
  a.scale = scale;
  a.partition_size = partition;
  a.max_splits = DecodeNumSplits(std::max(max_ctx, 1), partition) + 1;  // a spare split
  std::vector<float> ws(DecodeWorkspaceFloats(items, heads, shape.head_dim, a.max_splits), 0.0f);
  a.workspace = ws.data();
  const PagedKvView kv = host.View(host.data().data(), host.scales().data());
  for (int run = 0; run < 2; ++run) {  // twice on one workspace, as graph replays do
    std::fill(out.begin(), out.end(), 7.0f);
    ASSERT_EQ(DispatchKv(kv.dtype, kv.head_dim, EmuLauncher{a, kv, shape.group}), cudaSuccess);
    for (size_t e = 0; e < want.size(); ++e) {
      ASSERT_NEAR(out[e], want[e], 2e-5 + 2e-4 * std::fabs(want[e]))
          << "run " << run << " item " << e / qw << " head " << (e % qw) / shape.head_dim
          << " dim " << e % shape.head_dim;
    }
    const int64_t counters = int64_t{items} * heads;
    for (int64_t i = 0; i < counters; ++i) {
      int32_t c;
      std::memcpy(&c, &ws[ws.size() - counters + i], 4);
      ASSERT_EQ(c, 0) << "split counter " << i;
    }
  }
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

}  // namespace
}  // namespace weft::kernels::cuda

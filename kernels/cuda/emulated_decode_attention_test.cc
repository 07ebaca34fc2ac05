// The pipelined decode attention kernel's own source (decode_attention_pipelined.cu)
// run on the CPU by the host emulation (testing/host_emulation.h) against the CPU
// reference (kernels/cpu/paged_attention.h) — no GPU needed: its index arithmetic, tile
// pipeline bookkeeping, masking, token-lane merge, int8 dequantization and the
// last-CTA combination of splits (counters back at zero after every launch) are
// executed here, on fresh workspaces and on one workspace shared by plans of different
// shapes as the CUDA backend shares it (testing/decode_case.h). Timing, memory ordering
// and bank conflicts are not (the GPU test paged_attention_test covers the real thing).
#define WEFT_CUDA_HOST_EMULATION 1
#include "kernels/cuda/testing/host_emulation.h"
// The kernel under test, textually (its launch code is compiled out).
#include "kernels/cuda/decode_attention_pipelined.cu"

#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/testing/decode_case.h"

namespace weft::kernels::cuda {
namespace {

using testing::CaseShape;

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
    if constexpr (kHeadDim / 8 * 32 <= 512) return Run<KvT, kHeadDim, 32>();
    return cudaErrorInvalidValue;
  }
};

const testing::DecodeKernelUnderTest kPipelined{
    DecodeKernel::kPipelined, [](const DecodeAttentionArgs& a, const PagedKvView& kv) {
      const int group = a.num_heads / kv.num_kv_heads;
      ASSERT_EQ(DispatchKv(kv.dtype, kv.head_dim, EmuLauncher{a, kv, group}), cudaSuccess);
    }};

void Check(const CaseShape& shape, const std::vector<int32_t>& lengths,
           const std::vector<int32_t>& contexts, int32_t partition, uint32_t seed) {
  testing::CheckDecodeFresh(shape, lengths, contexts, partition, seed, kPipelined);
}

TEST(EmulatedDecodeAttentionTest, OneSplitAndSeveral) {
  // Llama-8B's GQA 4 at head_dim 128 (bdz 2) with contexts inside, on and past tile edges.
  const CaseShape s{2, 4, 128, 16, KvDtype::kBf16};
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

// Head dim 256 (Gemma 3: 4 query heads per KV head, 1 KV head) and sliding windows shorter
// than, equal to and longer than the contexts, cut inside tiles and splits: the splits
// cover [context - window, context).
TEST(EmulatedDecodeAttentionTest, HeadDim256AndSlidingWindows) {
  const std::vector<int32_t> lens = {1, 31, 33, 100, 250};
  for (KvDtype dt : {KvDtype::kBf16, KvDtype::kF16, KvDtype::kInt8}) {
    Check({1, 4, 256, 16, dt}, lens, lens, 64, 11);
    Check({1, 4, 256, 16, dt, 40}, lens, lens, 32, 12);
  }
  Check({2, 16, 256, 16, KvDtype::kBf16, 100}, {70, 130}, {70, 130}, 64, 13);  // 512 threads
  for (int32_t w : {1, 17, 32, 33, 64, 250}) {
    Check({2, 4, 128, 16, KvDtype::kBf16, w}, lens, lens, 64, 14);   // several splits
    Check({3, 3, 64, 7, KvDtype::kInt8, w}, lens, lens, 256, 15);    // one split, block 7
  }
}

// A graph bucket's grid (8 splits) over much shorter real contexts with split lengths
// derived on the device (DecodeAttentionArgs::device_min_partition; tile 32): 1000 ->
// 128-token splits (all 8), 300 -> 64 (5), 40 -> one, 129 -> 64 (3); with a window of
// 100, 1000 -> 64 (2).
TEST(EmulatedDecodeAttentionTest, SplitLengthsFromTheRealContexts) {
  testing::CheckDeviceSplits({1, 4, 128, 16, KvDtype::kBf16}, {1000, 300, 40, 0, 129}, 8, 64,
                             {8, 5, 0, 0, 3}, 16, kPipelined);
  testing::CheckDeviceSplits({3, 3, 64, 16, KvDtype::kInt8, 100}, {1000, 129}, 8, 64, {2, 2},
                             17, kPipelined);
}

// Issue 24: plans of different shapes on the one workspace the runner keeps (the first
// shrink, 4 items then 1 at context 300, left the heads uncombined on the old layout).
TEST(EmulatedDecodeAttentionTest, PlansOfDifferentShapesShareOneWorkspace) {
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kInt8}) {
    testing::RunDecodeSequence(testing::DefaultModelSteps(dt), kPipelined);
  }
}

TEST(EmulatedDecodeAttentionTest, ShapesAndKvTypesShareOneWorkspace) {
  testing::RunDecodeSequence(testing::MixedShapeSteps(), kPipelined);
}

}  // namespace
}  // namespace weft::kernels::cuda

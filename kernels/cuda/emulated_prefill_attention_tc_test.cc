// The tensor-core prefill kernel's own source (prefill_attention_tc.cu) run on the CPU
// by the host emulation (testing/host_emulation.h: mma.sync and ldmatrix emulated from
// their PTX fragment layouts, cp.async groups landing at their waits) against the CPU
// reference (kernels/cpu/paged_attention.h) on queries rounded as the kernel rounds them
// — no GPU needed for the fragment bookkeeping, causal and sliding-window masking, chunk
// offsets, the online softmax and the double buffering (testing/prefill_case.h). The GPU
// test (paged_attention_test) checks the real tensor cores.
#define WEFT_CUDA_HOST_EMULATION 1
#include "kernels/cuda/testing/host_emulation.h"
// The kernel under test, textually (its launch code is compiled out).
#include "kernels/cuda/prefill_attention_tc.cu"

#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/testing/prefill_case.h"

namespace weft::kernels::cuda {
namespace {

using testing::PrefillShape;

struct EmuLauncher {
  const PrefillAttentionArgs& a;
  const PagedKvView& kv;

  template <typename KvT, int kHeadDim>
  cudaError_t operator()() const {
    EmulateLaunch(dim3(a.num_tiles, kv.num_kv_heads), dim3(kThreads),
                  TcCfg<kHeadDim>::kSmemBytes, [&] { PrefillTcKernel<KvT, kHeadDim>(a, kv); });
    return cudaSuccess;
  }
};

const testing::PrefillKernelUnderTest kTc{
    [](const PrefillShape& s) { return PrefillTcTileTokens(s.group); },
    /*rounds_q=*/true,
    // The softmax weights are rounded to the MMA type (as on the GPU).
    [](const PrefillShape& s) { return s.dtype == KvDtype::kBf16 ? 5e-3 : 2e-3; },
    [](const PrefillAttentionArgs& a, const PagedKvView& kv) {
      ASSERT_EQ(DispatchKv(kv.dtype, kv.head_dim, EmuLauncher{a, kv}), cudaSuccess);
    }};

void Check(const PrefillShape& shape, const std::vector<std::pair<int32_t, int32_t>>& chunks,
           uint32_t seed) {
  testing::CheckPrefill(shape, chunks, seed, kTc);
}

TEST(EmulatedPrefillTcTest, GqaChunksAfterCachedPrefixes) {
  // Llama-8B's GQA 4 at head_dim 128: whole prompts, a chunk starting mid-block after a
  // cached prefix, one crossing two key tiles, a single token.
  Check({2, 4, 128, 16, KvDtype::kBf16}, {{0, 70}, {37, 30}, {100, 40}, {5, 1}}, 1);
}

TEST(EmulatedPrefillTcTest, EveryKvTypeAndHeadSize) {
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kInt8, KvDtype::kBf16}) {
    Check({1, 3, 64, 16, dt}, {{0, 45}, {64, 20}}, 2);  // the default model's shape
    Check({1, 1, 128, 16, dt}, {{0, 66}}, 3);            // MHA: 64 tokens per tile
    Check({1, 4, 256, 16, dt}, {{0, 40}, {50, 20}}, 6);  // Gemma 3: 32-key tiles
  }
}

TEST(EmulatedPrefillTcTest, LargeGroupsAndOddBlocks) {
  Check({1, 32, 64, 16, KvDtype::kBf16}, {{10, 5}}, 4);      // 2 tokens per tile
  Check({2, 3, 64, 7, KvDtype::kInt8}, {{0, 23}, {6, 9}}, 5);  // block size 7
}

// Sliding windows cut inside key tiles and blocks, shorter and longer than the chunks,
// after cached prefixes (the key tiles start at the tile's first row's window).
TEST(EmulatedPrefillTcTest, SlidingWindows) {
  for (int32_t w : {1, 20, 64, 100}) {
    Check({2, 4, 128, 16, KvDtype::kBf16, w}, {{0, 70}, {37, 30}, {100, 40}, {5, 1}}, 7);
    Check({1, 4, 256, 16, KvDtype::kF16, w}, {{0, 50}, {90, 17}}, 8);
    Check({2, 3, 64, 7, KvDtype::kInt8, w}, {{0, 23}, {60, 9}}, 9);
  }
}

}  // namespace
}  // namespace weft::kernels::cuda

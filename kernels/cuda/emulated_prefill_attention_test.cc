// The CUDA-core prefill kernel's own source (prefill_attention.cu) run on the CPU by the
// host emulation (testing/host_emulation.h) against the CPU reference
// (kernels/cpu/paged_attention.h): row and lane bookkeeping, the staged K/V tiles, causal
// and sliding-window masking, chunk offsets after cached prefixes, every KV type and head
// size (testing/prefill_case.h). The GPU test (paged_attention_test) runs it for real.
#define WEFT_CUDA_HOST_EMULATION 1
#include "kernels/cuda/testing/host_emulation.h"
// The kernel under test, textually (its launch code is compiled out).
#include "kernels/cuda/prefill_attention.cu"

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
    EmulateLaunch(dim3(a.num_tiles, kv.num_kv_heads), dim3(kPrefillThreads), 0,
                  [&] { PrefillKernel<KvT, kHeadDim>(a, kv); });
    return cudaSuccess;
  }
};

const testing::PrefillKernelUnderTest kCore{
    [](const PrefillShape& s) { return PrefillTileTokens(s.group, s.head_dim); },
    /*rounds_q=*/false,
    [](const PrefillShape&) { return 2e-5; },  // fp32 throughout, another summation order
    [](const PrefillAttentionArgs& a, const PagedKvView& kv) {
      ASSERT_EQ(DispatchKv(kv.dtype, kv.head_dim, EmuLauncher{a, kv}), cudaSuccess);
    }};

void Check(const PrefillShape& shape, const std::vector<std::pair<int32_t, int32_t>>& chunks,
           uint32_t seed) {
  testing::CheckPrefill(shape, chunks, seed, kCore);
}

TEST(EmulatedPrefillTest, EveryKvTypeAndHeadSize) {
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kInt8, KvDtype::kBf16}) {
    Check({1, 3, 64, 16, dt}, {{0, 45}, {64, 20}}, 1);    // the default model's shape
    Check({2, 4, 128, 16, dt}, {{0, 40}, {37, 9}}, 2);    // GQA 4 after a cached prefix
    Check({1, 4, 256, 16, dt}, {{0, 40}, {50, 20}}, 3);   // Gemma 3: 16-key tiles
  }
  Check({2, 3, 64, 7, KvDtype::kInt8}, {{0, 23}, {6, 9}, {5, 1}}, 4);  // block size 7
}

TEST(EmulatedPrefillTest, SlidingWindows) {
  for (int32_t w : {1, 15, 32, 100}) {
    Check({2, 4, 128, 16, KvDtype::kBf16, w}, {{0, 70}, {37, 30}, {5, 1}}, 5);
    Check({1, 4, 256, 16, KvDtype::kF16, w}, {{0, 50}, {90, 17}}, 6);
    Check({2, 3, 64, 7, KvDtype::kInt8, w}, {{0, 23}, {60, 9}}, 7);
  }
}

}  // namespace
}  // namespace weft::kernels::cuda

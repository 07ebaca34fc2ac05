// The kSplitV1 decode kernels' own source (decode_attention.cu: the split kernel, then
// the reduction kernel) run on the CPU by the host emulation (testing/host_emulation.h)
// against the CPU reference — the same cases as emulated_decode_attention_test, on
// fresh workspaces and on one workspace shared by plans of different shapes, as the CUDA
// backend shares it (testing/decode_case.h).
#define WEFT_CUDA_HOST_EMULATION 1
#include "kernels/cuda/testing/host_emulation.h"
// The kernels under test, textually (the launch code is compiled out).
#include "kernels/cuda/decode_attention.cu"

#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/testing/decode_case.h"

namespace weft::kernels::cuda {
namespace {

using testing::CaseShape;

// Emulated launches as DecodeLauncher queues them.
struct EmuLauncher {
  const DecodeAttentionArgs& a;
  const PagedKvView& kv;

  template <typename KvT, int kHeadDim>
  cudaError_t operator()() const {
    const int32_t group = a.num_heads / kv.num_kv_heads;
    EmulateLaunch(dim3(kv.num_kv_heads, a.num_items, a.max_splits), dim3(kDecodeThreads),
                  DecodeSmemBytes(group, a.partition_size, kHeadDim),
                  [&] { DecodeSplitKernel<KvT, kHeadDim>(a, kv); });
    if (a.max_splits > 1) {
      EmulateLaunch(dim3(a.num_heads, a.num_items), dim3(kHeadDim), 0,
                    [&] { DecodeReduceKernel<kHeadDim>(a); });
    }
    return cudaSuccess;
  }
};

const testing::DecodeKernelUnderTest kSplitV1{
    DecodeKernel::kSplitV1, [](const DecodeAttentionArgs& a, const PagedKvView& kv) {
      ASSERT_LE(int64_t{a.num_heads / kv.num_kv_heads} * a.partition_size, kMaxScoreFloats);
      ASSERT_EQ(DispatchKv(kv.dtype, kv.head_dim, EmuLauncher{a, kv}), cudaSuccess);
    }};

TEST(EmulatedDecodeAttentionV1Test, OneSplitSeveralAndPadding) {
  const CaseShape s{2, 4, 128, 16, KvDtype::kBf16};
  const std::vector<int32_t> lens = {1, 31, 32, 33, 100, 250};
  testing::CheckDecodeFresh(s, lens, lens, 256, 1, kSplitV1);
  testing::CheckDecodeFresh(s, lens, lens, 64, 2, kSplitV1);
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kInt8}) {
    testing::CheckDecodeFresh({3, 3, 64, 16, dt}, {3, 40, 129}, {3, 40, 129}, 48, 4, kSplitV1);
  }
  testing::CheckDecodeFresh({2, 4, 64, 7, KvDtype::kF16}, {20, 16, 90}, {20, 0, 61}, 32, 10,
                            kSplitV1);
}

// Its partials and log-sum-exps share the runner's one workspace too.
// (int8 KV: in the mixed shapes.)
TEST(EmulatedDecodeAttentionV1Test, PlansOfDifferentShapesShareOneWorkspace) {
  testing::RunDecodeSequence(testing::DefaultModelSteps(KvDtype::kF16), kSplitV1);
}

TEST(EmulatedDecodeAttentionV1Test, ShapesAndKvTypesShareOneWorkspace) {
  testing::RunDecodeSequence(testing::MixedShapeSteps(), kSplitV1);
}

}  // namespace
}  // namespace weft::kernels::cuda

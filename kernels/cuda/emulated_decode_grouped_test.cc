// The grouped decode attention kernel's own source (decode_attention_grouped.cu) run on
// the CPU by the host emulation (testing/host_emulation.h: warp shuffles, ldmatrix and
// mma.sync m16n8k16 emulated from their PTX fragment layouts, cp.async groups landing at
// their waits) against the CPU reference (kernels/cpu/paged_attention.h) — no GPU needed
// for its index arithmetic, the per-tile conversion shared by a group's heads (CUDA
// cores, groups 1-3), the tensor-core fragments (groups >= 4, rows padded to 16 or 32),
// int8 dequantization, masking, the lane/warp merge, the last-CTA combination of splits
// (counters back at zero), sliding windows, graph padding, split lengths derived on the
// device, and plans of different shapes on one workspace (testing/decode_case.h).
// Timing, memory ordering and bank conflicts are not (paged_attention_test on a GPU).
#define WEFT_CUDA_HOST_EMULATION 1
#include "kernels/cuda/testing/host_emulation.h"
// The kernel under test, textually (its launch code is compiled out).
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/decode_attention_grouped.cu"
#include "kernels/cuda/testing/decode_case.h"

namespace weft::kernels::cuda {
namespace {

using testing::CaseShape;

// Emulated launch of the kernel instance the real launcher picks.
struct EmuLaunch {
  const DecodeAttentionArgs& a;
  const PagedKvView& kv;

  template <typename KvT, int kHeadDim, int kGroup>
  cudaError_t Run() const {
    using C = GroupedCfg<KvT, kHeadDim, kGroup>;
    EmulateLaunch(dim3(kv.num_kv_heads, a.num_items, a.max_splits), dim3(C::kThreads),
                  C::kSmemBytes, [&] { GroupedDecodeKernel<KvT, kHeadDim, kGroup>(a, kv); });
    return cudaSuccess;
  }
};
struct EmuLauncher {
  const DecodeAttentionArgs& a;
  const PagedKvView& kv;
  template <typename KvT, int kHeadDim>
  cudaError_t operator()() const {
    return DispatchGroupedInstance<KvT, kHeadDim>(a.num_heads / kv.num_kv_heads, EmuLaunch{a, kv});
  }
};

bool TensorCores(const CaseShape& s) { return s.group >= kGroupedDecodeTensorCoreMinGroup; }

const testing::DecodeKernelUnderTest kGrouped{
    DecodeKernel::kGrouped,
    [](const DecodeAttentionArgs& a, const PagedKvView& kv) {
      ASSERT_EQ(DispatchKv(kv.dtype, kv.head_dim, EmuLauncher{a, kv}), cudaSuccess);
    },
    TensorCores,
    // Tensor cores: q and the softmax weights rounded to bf16 / fp16 (the tensor-core
    // prefill's tolerances); CUDA cores: fp32 throughout.
    [](const CaseShape& s) {
      return !TensorCores(s) ? 1e-4 : s.dtype == KvDtype::kBf16 ? 5e-3 : 2e-3;
    }};

void Check(const CaseShape& shape, const std::vector<int32_t>& lengths,
           const std::vector<int32_t>& contexts, int32_t partition, uint32_t seed) {
  testing::CheckDecodeFresh(shape, lengths, contexts, partition, seed, kGrouped);
}

// Every KV type, head size and group the brief names: contexts on and around the tiles'
// edges (64 tokens; 32 at head_dim 256), one split and several (partition 64).
// The int8 tile's half2 dequantization (Int8x8ScaledToHalf) against the fp32 route it
// replaced (Int8x8ToFloat, an fp32 multiply, PackPair<__half>): the same bits for every
// int8 value and every finite fp16 scale, both signs (infinite and NaN scales excluded:
// NaN payloads may differ). The host's fp16 multiply here is the exact product rounded
// once, as IEEE says HMUL2 is (paged_attention_test repeats the kernel on a GPU).
TEST(EmulatedDecodeGroupedTest, Int8DequantizationInHalf2IsTheFp32RoutesBits) {
  int64_t checked = 0;
  for (uint32_t chunk = 0; chunk < 32; ++chunk) {  // bytes 8 chunk .. 8 chunk + 7
    uint8_t bytes[8];
    for (int e = 0; e < 8; ++e) bytes[e] = static_cast<uint8_t>(8 * chunk + e);
    uint2 raw;
    std::memcpy(&raw, bytes, 8);
    float x[8];
    Int8x8ToFloat(raw, x);
    for (int e = 0; e < 8; ++e) ASSERT_EQ(x[e], static_cast<float>(static_cast<int8_t>(bytes[e])));
    for (uint32_t sb = 0; sb < 0x10000; ++sb) {
      if ((sb & 0x7c00) == 0x7c00) continue;  // inf / NaN
      const uint16_t bits16 = static_cast<uint16_t>(sb);
      const float sc = HalfBitsToFloat(bits16);
      const uint4 want{PackPair<__half>(x[0] * sc, x[1] * sc),
                       PackPair<__half>(x[2] * sc, x[3] * sc),
                       PackPair<__half>(x[4] * sc, x[5] * sc),
                       PackPair<__half>(x[6] * sc, x[7] * sc)};
      const uint4 got = Int8x8ScaledToHalf(raw, bits16);
      ASSERT_TRUE(got.x == want.x && got.y == want.y && got.z == want.z && got.w == want.w)
          << "bytes from " << 8 * chunk << " scale bits " << std::hex << sb << ": " << got.x
          << " " << got.y << " " << got.z << " " << got.w << " want " << want.x << " "
          << want.y << " " << want.z << " " << want.w;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 32 * (65536 - 2 * 1024));
}

TEST(EmulatedDecodeGroupedTest, EveryKvTypeHeadDimAndGroup) {
  const std::vector<int32_t> lens = {1, 31, 32, 33, 64, 65, 130};
  uint32_t seed = 1;
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kBf16, KvDtype::kInt8}) {
    for (int32_t hd : {64, 128, 256}) {
      for (int32_t group : {1, 2, 3, 4, 8, 16}) {
        Check({1, group, hd, 16, dt}, lens, lens, 64, ++seed);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// Two KV heads (the CTA's head offset), the padded rows of groups 5 and 12, the largest
// groups (32 rows: two m-tiles at head_dim 64 and 128; 16 at 256), block size 7.
TEST(EmulatedDecodeGroupedTest, KvHeadsPaddedRowsAndLargestGroups) {
  const std::vector<int32_t> lens = {20, 97};
  Check({2, 5, 128, 16, KvDtype::kBf16}, lens, lens, 64, 40);
  Check({2, 12, 64, 16, KvDtype::kInt8}, lens, lens, 64, 41);
  Check({2, 3, 64, 16, KvDtype::kF16}, lens, lens, 64, 42);  // the default model's group
  Check({1, 32, 64, 16, KvDtype::kF16}, lens, lens, 64, 43);
  Check({1, 32, 128, 16, KvDtype::kInt8}, lens, lens, 64, 44);
  Check({1, 20, 128, 16, KvDtype::kBf16}, lens, lens, 32, 45);
  Check({1, 16, 256, 16, KvDtype::kInt8}, lens, lens, 64, 46);
  Check({2, 4, 128, 7, KvDtype::kInt8}, {6, 7, 8, 50}, {6, 7, 8, 50}, 32, 47);
  Check({2, 2, 64, 7, KvDtype::kBf16}, {6, 7, 8, 50}, {6, 7, 8, 50}, 32, 48);
}

// Split lengths that are not multiples of the tile (shorter than one, cutting tiles),
// many splits combined by the last CTA; graph padding (context 0) and an item decoding
// short of its length.
TEST(EmulatedDecodeGroupedTest, OddSplitsAndPadding) {
  const std::vector<int32_t> lens = {1, 40, 150, 333};
  for (int32_t part : {7, 33, 100}) {
    Check({1, 3, 64, 16, KvDtype::kBf16}, lens, lens, part, 50);
    Check({1, 8, 128, 16, KvDtype::kF16}, lens, lens, part, 51);
  }
  Check({2, 4, 64, 16, KvDtype::kF16}, {20, 16, 90}, {20, 0, 61}, 32, 52);
  Check({2, 2, 128, 16, KvDtype::kInt8}, {20, 16, 90}, {20, 0, 61}, 32, 53);
}

// Sliding windows shorter than, equal to and longer than the contexts, cut inside tiles
// and splits: the splits cover [context - window, context).
TEST(EmulatedDecodeGroupedTest, SlidingWindows) {
  const std::vector<int32_t> lens = {1, 31, 65, 100, 250};
  for (int32_t w : {1, 17, 64, 65, 250}) {
    Check({1, 4, 256, 16, KvDtype::kBf16, w}, lens, lens, 64, 60);  // Gemma 3's shape
    Check({2, 3, 64, 7, KvDtype::kInt8, w}, lens, lens, 48, 61);
    Check({1, 8, 128, 16, KvDtype::kInt8, w}, lens, lens, 256, 62);
  }
}

// A graph bucket's grid (8 splits) over much shorter real contexts: each item's splits
// are cut from its own context (max(min, ceil(span / 8)) rounded up to the tile), so the
// 1000-token item uses all 8 splits where the bucket's partition would give it one.
TEST(EmulatedDecodeGroupedTest, SplitLengthsFromTheRealContexts) {
  // Tile 64: 1000 -> 128-token splits (8); 300 -> 64 (5); 40 -> one; 129 -> 64 (3).
  testing::CheckDeviceSplits({1, 4, 128, 16, KvDtype::kBf16}, {1000, 300, 40, 0, 129}, 8, 64,
                             {8, 5, 0, 0, 3}, 70, kGrouped);
  testing::CheckDeviceSplits({2, 3, 64, 16, KvDtype::kInt8}, {1000, 300, 40, 0, 129}, 8, 64,
                             {8, 5, 0, 0, 3}, 71, kGrouped);
  // Tile 32 (head_dim 256), minimum 32: 129 -> 32-token splits (5).
  testing::CheckDeviceSplits({1, 4, 256, 16, KvDtype::kF16}, {1000, 300, 129}, 8, 32, {8, 5, 5}, 72,
                             kGrouped);
  // A window of 200: the span is 200 -> 64-token splits (4); 150 -> 3.
  testing::CheckDeviceSplits({1, 8, 64, 16, KvDtype::kBf16, 200}, {1000, 150}, 8, 64, {4, 3}, 73,
                             kGrouped);
}

TEST(EmulatedDecodeGroupedTest, PlansOfDifferentShapesShareOneWorkspace) {
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kBf16, KvDtype::kInt8}) {
    testing::RunDecodeSequence(testing::DefaultModelSteps(dt), kGrouped);
  }
  testing::RunDecodeSequence(testing::MixedShapeSteps(), kGrouped);
}

}  // namespace
}  // namespace weft::kernels::cuda

// The fused dequantize + tensor-core GEMM's own source (quant_gemm.cu) run on the CPU by
// the host emulation (testing/host_emulation.h: mma.sync and ldmatrix emulated from their
// PTX fragment layouts), for every type QuantGemv takes, against its CPU twin
// (testing/quant_gemm_reference.h: DequantizeRow rounded to bf16, times the bf16 rows of
// x, summed in double).
// Tolerance: the products of two bf16 are exact in fp32, so the kernel's only error is
// fp32 summation — k products within a split, the splits, then y when accumulating:
// |got - want| <= (k + splits + 1) * 2^-24 * (sum_c |x_c w_c| + |y0|), the bound of
// recursive fp32 summation, which holds whatever the order (a wrong or missing weight,
// row or output is far outside it).
// Shapes: the default model's (576 x 576, 1,536 x 576, 576 x 1,536), Gemma 3 270M's
// (1,024 x 640, 2,048 x 640, 640 x 2,048) and n, m, k off the tile edges; m in
// {5, 8, 17, 64, 256} (each tile size, partial tiles); accumulate on and off; split-K
// (132 SMs) and unsplit; x and y rows wider than k and n (columns past n must stay
// untouched). The emulated mma costs ~0.1 ms, so the largest products are kept to one
// m = 256 case (576 x 576); quant_test runs more on a GPU.
// The GPU test quant_test repeats it on the hardware.
#define WEFT_CUDA_HOST_EMULATION 1
#include "kernels/cuda/testing/host_emulation.h"
// The kernels under test, textually (their launch code is compiled out).
#include "kernels/cuda/quant_gemm.cu"

#include <cmath>
#include <random>
#include <vector>

#include "common/ggml_types.h"
#include "gtest/gtest.h"
#include "kernels/cuda/quant_repack.h"
#include "kernels/cuda/testing/quant_gemm_reference.h"
#include "kernels/cuda/testing/random_weights.h"

namespace weft::kernels::cuda {
namespace {

constexpr int32_t kH100Sms = 132;

template <WeightType kType>
void LaunchEmulated(const QuantGemmGrid& g, const GemvWeights& w, const __nv_bfloat16* x,
                    int64_t ldx, int32_t m, float* y, int64_t ldy, bool accumulate,
                    float* partials) {
  const dim3 grid(static_cast<unsigned>(g.tiles_n), static_cast<unsigned>(g.tiles_m),
                  static_cast<unsigned>(g.splits));
  EmulateLaunch(grid, dim3(kQgThreads), 0, [&] {
    if (g.tile_tokens == 16) {
      QuantGemmKernel<kType, 16>(w, x, ldx, m, y, ldy, accumulate, partials, g.splits);
    } else if (g.tile_tokens == 32) {
      QuantGemmKernel<kType, 32>(w, x, ldx, m, y, ldy, accumulate, partials, g.splits);
    } else {
      QuantGemmKernel<kType, 64>(w, x, ldx, m, y, ldy, accumulate, partials, g.splits);
    }
  });
  if (g.splits > 1) {
    // Few blocks, so that the grid-stride loop runs more than once per thread.
    EmulateLaunch(dim3(3), dim3(kSumThreads), 0, [&] {
      SplitKSumKernel(partials, g.splits, m, w.n, y, ldy, accumulate);
    });
  }
}

struct Shape {
  int64_t n, k;
};

template <WeightType kType>
void Check(Shape s, int32_t m, bool accumulate, int32_t num_sms, uint32_t seed) {
  const GgmlType type = static_cast<GgmlType>(kType);
  SCOPED_TRACE(::testing::Message() << GgmlTypeName(static_cast<uint32_t>(type)) << " n="
                                    << s.n << " k=" << s.k << " m=" << m << " accumulate="
                                    << accumulate << " sms=" << num_sms);
  const int64_t n = s.n, k = s.k, ldx = k + 8, ldy = n + 3;
  const std::vector<uint8_t> bytes = testing::RandomGgufMatrix(type, n, k, seed);
  RepackedMatrix r;
  ASSERT_TRUE(RepackForGemv(kType, bytes.data(), RowBytes(type, k), n, k, &r));
  const GemvWeights w{kType, r.qs.data(), r.d.empty() ? nullptr : r.d.data(),
                      r.m.empty() ? nullptr : r.m.data(), n, k};
  std::mt19937 rng(seed + 1);
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::vector<uint16_t> x(m * ldx, Fp32ToBf16(NAN));  // the padding past k: NaN
  for (int32_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < k; ++c) x[i * ldx + c] = Fp32ToBf16(val(rng));
  }
  std::vector<float> y0(m * ldy);
  for (float& v : y0) v = accumulate ? val(rng) : 0.5f;
  std::vector<float> y = y0;

  const QuantGemmGrid g = PlanQuantGemm(m, n, k, num_sms);
  ASSERT_LE(QuantGemmScratchFloats(g, m, n), QuantGemmMaxScratchFloats(num_sms));
  std::vector<float> partials(std::max<int64_t>(1, QuantGemmScratchFloats(g, m, n)), NAN);
  LaunchEmulated<kType>(g, w, reinterpret_cast<const __nv_bfloat16*>(x.data()), ldx, m,
                        y.data(), ldy, accumulate, partials.data());
  const testing::QuantGemmExpected e = testing::QuantGemmReference(
      type, bytes.data(), n, k, x.data(), ldx, m, y0.data(), ldy, accumulate);
  EXPECT_EQ(testing::QuantGemmMismatch(e, y, y0, m, n, ldy, k + g.splits + 1), "")
      << "splits " << g.splits;
}

// Every type on shapes off the tile edges (n not a multiple of 16 or 32, a k-tail of
// fewer than 4 blocks in a split), each row count of a tile size.
template <WeightType kType>
void CheckOffEdges(int64_t k) {
  Check<kType>({45, k}, 5, false, kH100Sms, 11);
  Check<kType>({45, k}, 17, true, kH100Sms, 12);
  Check<kType>({70, k}, 64, false, 0, 13);  // no scratch: one split
  Check<kType>({13, k}, 100, true, kH100Sms, 14);
}

TEST(EmulatedQuantGemmTest, EveryTypeOffTheTileEdges) {
  CheckOffEdges<WeightType::kQ4_0>(576);
  CheckOffEdges<WeightType::kQ4_1>(608);
  CheckOffEdges<WeightType::kQ8_0>(544);
  CheckOffEdges<WeightType::kQ5_0>(640);
  CheckOffEdges<WeightType::kQ5_1>(576);
  CheckOffEdges<WeightType::kQ4_K>(768);
  CheckOffEdges<WeightType::kQ5_K>(512);
  CheckOffEdges<WeightType::kQ6_K>(768);
}

// SmolLM2-135M (Q4_1 / Q8_0): hidden 576, FFN 1,536; every row count the issue names.
TEST(EmulatedQuantGemmTest, DefaultModelEveryRowCount) {
  for (int32_t m : {5, 8, 17, 64, 256}) {
    Check<WeightType::kQ4_1>({576, 576}, m, m % 2 == 0, kH100Sms, 21);
  }
}

TEST(EmulatedQuantGemmTest, DefaultModelShapes) {
  Check<WeightType::kQ4_1>({1536, 576}, 8, true, kH100Sms, 22);
  Check<WeightType::kQ8_0>({1536, 576}, 17, false, kH100Sms, 23);
  Check<WeightType::kQ8_0>({576, 1536}, 17, true, kH100Sms, 24);
  Check<WeightType::kQ4_1>({576, 1536}, 5, false, kH100Sms, 25);
}

// Gemma 3 270M (Q5_0, Q4_K, Q6_K, Q8_0): hidden 640, q 1,024, FFN 2,048.
TEST(EmulatedQuantGemmTest, GemmaShapes) {
  Check<WeightType::kQ5_0>({1024, 640}, 8, false, kH100Sms, 31);
  Check<WeightType::kQ8_0>({2048, 640}, 17, true, kH100Sms, 32);
  Check<WeightType::kQ4_K>({640, 2048}, 20, true, kH100Sms, 33);
  Check<WeightType::kQ6_K>({640, 2048}, 5, false, kH100Sms, 34);
}

// The plan: split-K lifts small shapes to at least the SMs (up to the split limit), never
// splits what already fills them, and never needs more scratch than the bound.
TEST(QuantGemmPlanTest, SplitsFillTheSmsWithinTheScratchBound) {
  for (const Shape s : {Shape{576, 576}, Shape{1536, 576}, Shape{576, 1536}, Shape{640, 2048},
                        Shape{49152, 576}, Shape{45, 64}, Shape{262144, 640}}) {
    for (int32_t m = 1; m <= kMaxQuantGemmRows; ++m) {
      const QuantGemmGrid g = PlanQuantGemm(m, s.n, s.k, kH100Sms);
      const int64_t tiles = g.tiles_n * g.tiles_m;
      ASSERT_GE(g.tile_tokens * g.tiles_m, m);
      ASSERT_GE(g.splits, 1);
      ASSERT_LE(g.splits, kQuantGemmMaxSplits);
      ASSERT_LE(g.splits, std::max<int64_t>(1, s.k / 64));
      if (tiles >= kH100Sms) {
        ASSERT_EQ(g.splits, 1) << s.n << " " << m;
      }
      if (g.splits < kQuantGemmMaxSplits && g.splits < s.k / 64) {
        ASSERT_GE(tiles * g.splits, kH100Sms) << s.n << " " << m;
      }
      ASSERT_LE(QuantGemmScratchFloats(g, m, s.n), QuantGemmMaxScratchFloats(kH100Sms));
    }
  }
  EXPECT_EQ(PlanQuantGemm(8, 576, 576, kH100Sms).splits, 8);  // 18 tiles -> 144 CTAs
  EXPECT_EQ(PlanQuantGemm(256, 576, 576, kH100Sms).splits, 2);  // 72 tiles -> 144
  EXPECT_EQ(PlanQuantGemm(64, 576, 576, 0).splits, 1);
}

}  // namespace
}  // namespace weft::kernels::cuda

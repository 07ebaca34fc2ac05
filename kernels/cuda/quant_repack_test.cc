// RepackForGemv + GemvReference (plain C++, runs in every build) against the CPU matmul
// reference on the GGUF bytes: the repacked layout holds exactly the same weights.
#include "kernels/cuda/quant_repack.h"

#include <random>
#include <vector>

#include "common/ggml_types.h"
#include "gtest/gtest.h"
#include "kernels/cpu/quant_matmul.h"
#include "kernels/cuda/testing/random_weights.h"

namespace weft::kernels::cuda {
namespace {

class RepackTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(RepackTest, GemvReferenceEqualsCpuMatmul) {
  const GgmlType type = GetParam();
  const int64_t block = GetGgmlTypeTraits(static_cast<uint32_t>(type))->block_size;
  const int64_t n = 37, k = 10 * block, m = 3;
  // Rows of a wider matrix (a tensor-parallel column slice): stride > row bytes.
  const int64_t k_full = k + 2 * block;
  const std::vector<uint8_t> bytes = testing::RandomGgufMatrix(type, n, k_full, 11);
  const int64_t stride = RowBytes(type, k_full);
  const uint8_t* start = bytes.data() + RowBytes(type, block);  // skip the first block column
  RepackedMatrix r;
  ASSERT_TRUE(RepackForGemv(static_cast<WeightType>(type), start, stride, n, k, &r));
  std::mt19937 rng(3);
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::vector<float> x(m * k);
  for (float& v : x) v = val(rng);
  std::vector<float> got(m * n), want(m * n);
  GemvReference(r, x.data(), k, m, got.data(), n);
  MatmulReference(QuantMatrix{type, start, n, k, stride}, x.data(), k, m, want.data(), n, 0, n);
  EXPECT_EQ(got, want);
}

INSTANTIATE_TEST_SUITE_P(Types, RepackTest,
                         ::testing::Values(GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0,
                                           GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ4_K,
                                           GgmlType::kQ5_K, GgmlType::kQ6_K));

TEST(RepackTest, RejectsOtherTypes) {
  RepackedMatrix r;
  const uint8_t dummy[512] = {};
  EXPECT_FALSE(RepackForGemv(WeightType::kF16, dummy, 64, 1, 32, &r));
  EXPECT_FALSE(RepackForGemv(WeightType::kQ4_0, dummy, 18, 1, 16, &r));
  EXPECT_FALSE(RepackForGemv(WeightType::kQ4_K, dummy, 144, 1, 128, &r));  // half a super-block
  EXPECT_TRUE(RepackForGemv(WeightType::kQ6_K, dummy, 210, 1, 256, &r));
}

}  // namespace
}  // namespace weft::kernels::cuda

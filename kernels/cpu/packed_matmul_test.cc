#include "kernels/cpu/packed_matmul.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/ggml_types.h"
#include "gtest/gtest.h"
#include "kernels/cpu/testing/random_weights.h"

namespace weft::kernels {
namespace {

struct Problem {
  GgmlType type;
  int64_t n, k, m, ldx;
  std::vector<uint8_t> raw;     // row-major GGUF bytes
  std::vector<uint8_t> packed;
  std::vector<float> x;
};

Problem Make(GgmlType type, int64_t n, int64_t k, int64_t m, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> v(-2.0f, 2.0f);
  Problem p{type, n, k, m, k + 5, testing::RandomQuantRows(type, n, k, rng), {}, {}};
  const int64_t rb = RowBytes(type, k);
  p.packed.resize(PackedBytes(type, n, k));
  PackWeights(QuantMatrix{type, p.raw.data(), n, k, rb}, p.packed.data());
  p.x.resize(m * p.ldx);
  for (float& f : p.x) f = v(rng);
  return p;
}

std::vector<float> RunPacked(const Problem& p, int64_t m_first, int64_t m, int splits) {
  std::vector<float> y(m * p.n, NAN);
  const PackedMatrix w{p.type, p.packed.data(), p.n, p.k};
  for (int s = 0; s < splits; ++s) {
    PackedMatmul(w, p.x.data() + m_first * p.ldx, p.ldx, m, y.data(), p.n, p.n * s / splits,
                 p.n * (s + 1) / splits);
  }
  return y;
}

const GgmlType kTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0};

TEST(PackedMatmulTest, MatchesExactDequantizedProduct) {
  for (GgmlType type : kTypes) {
    if (!PackedMatmulSupported(type, 256)) GTEST_SKIP() << "no AVX-512";
    SCOPED_TRACE(GgmlTypeName(static_cast<uint32_t>(type)));
    const Problem p = Make(type, 45, 256, 11, 1);  // a partial last panel
    const std::vector<float> y = RunPacked(p, 0, p.m, 3);
    std::vector<float> row(p.k);
    for (int64_t j = 0; j < p.n; ++j) {
      ASSERT_TRUE(DequantizeRow(type, p.raw.data() + j * RowBytes(type, p.k), row.data(), p.k).ok());
      for (int64_t i = 0; i < p.m; ++i) {
        double exact = 0, mag = 0;
        for (int64_t c = 0; c < p.k; ++c) {
          exact += double{row[c]} * p.x[i * p.ldx + c];
          mag += std::fabs(double{row[c]} * p.x[i * p.ldx + c]);
        }
        ASSERT_NEAR(y[i * p.n + j], exact, 3e-6 * mag + 1e-6) << "row " << j << " token " << i;
      }
    }
  }
}

// Every output depends only on its own token: any m, any first token, any column split
// (aligned to panels or not) gives the same bits.
TEST(PackedMatmulTest, BatchInvariantBitwise) {
  for (GgmlType type : kTypes) {
    if (!PackedMatmulSupported(type, 192)) GTEST_SKIP() << "no AVX-512";
    SCOPED_TRACE(GgmlTypeName(static_cast<uint32_t>(type)));
    const Problem p = Make(type, 70, 192, 21, 2);
    const std::vector<float> all = RunPacked(p, 0, p.m, 1);
    for (int64_t m : {1, 2, 3, 4, 5, 7, 8, 9, 13}) {
      for (int64_t first : {int64_t{0}, p.m - m}) {
        for (int splits : {1, 3, 5}) {
          const std::vector<float> part = RunPacked(p, first, m, splits);
          for (int64_t i = 0; i < m * p.n; ++i) {
            ASSERT_EQ(part[i], all[first * p.n + i]) << "m=" << m << " splits=" << splits;
          }
        }
      }
    }
  }
}

TEST(PackedMatmulTest, SupportAndSizes) {
  EXPECT_FALSE(PackedMatmulSupported(GgmlType::kF32, 64));
  EXPECT_FALSE(PackedMatmulSupported(GgmlType::kQ4_1, 48));
  EXPECT_FALSE(PackedMatmulSupported(GgmlType::kQ4_1, kPackedMaxK + 32));
  EXPECT_EQ(PackedBytes(GgmlType::kQ4_1, 32, 64), 2 * 2 * 320);
  EXPECT_EQ(PackedBytes(GgmlType::kQ8_0, 17, 32), 2 * 544);
  // Same bytes as the source for whole panels.
  EXPECT_EQ(PackedBytes(GgmlType::kQ4_1, 1536, 576), RowBytes(GgmlType::kQ4_1, 576) * 1536);
  EXPECT_EQ(PackedBytes(GgmlType::kQ8_0, 49152, 576), RowBytes(GgmlType::kQ8_0, 576) * 49152);
}

}  // namespace
}  // namespace weft::kernels

#include "kernels/cpu/bf16_matmul.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/ggml_types.h"
#include "gtest/gtest.h"
#include "kernels/cpu/testing/random_weights.h"

namespace weft::kernels {
namespace {

const GgmlType kTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0};

struct Problem {
  GgmlType type;
  int64_t n, k, m;
  std::vector<uint8_t> raw, packed;
  std::vector<float> x;       // [m][k]
  std::vector<uint16_t> xb;   // bf16 rows
  Bf16Rows rows;
};

Problem Make(GgmlType type, int64_t n, int64_t k, int64_t m, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> v(-2.0f, 2.0f);
  Problem p{type, n, k, m, testing::RandomQuantRows(type, n, k, rng), {}, {}, {}, {}};
  p.packed.resize(Bf16PackedBytes(type, n, k));
  PackBf16Weights(QuantMatrix{type, p.raw.data(), n, k, RowBytes(type, k)}, p.packed.data());
  p.x.resize(m * k);
  for (float& f : p.x) f = v(rng);
  p.xb.resize(Bf16RowsElements(m, k));
  p.rows = Bf16Rows{k, p.xb.data()};
  ConvertRowsBf16(p.x.data(), k, 0, m, &p.rows);
  return p;
}

Bf16PackedMatrix Packed(const Problem& p) { return {p.type, p.packed.data(), p.n, p.k}; }

// Rows [first, first + m) of p.x (converted into a buffer of their own), columns split
// into `splits` calls.
std::vector<float> RunRows(const Problem& p, int64_t first, int64_t m, int splits) {
  std::vector<float> y(m * p.n, NAN);
  std::vector<uint16_t> xb(Bf16RowsElements(m, p.k), 0xFFFF);  // padding rows: NaN
  Bf16Rows rows{p.k, xb.data()};
  ConvertRowsBf16(p.x.data() + first * p.k, p.k, 0, m, &rows);
  for (int s = 0; s < splits; ++s) {
    Bf16Matmul(Packed(p), rows, m, y.data(), p.n, p.n * s / splits, p.n * (s + 1) / splits);
  }
  return y;
}

bool SameBits(float a, float b) {
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;
}

class Bf16MatmulTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Bf16MatmulSupported()) GTEST_SKIP() << "no usable AMX bf16 on this CPU/OS";
  }
};

TEST_F(Bf16MatmulTest, ConvertRowsRoundsToNearestEven) {
  std::vector<float> x = {1.0f, -2.5f, 3.14159f, 1e-3f, 65504.0f, -0.0f, 1.00390625f, 1.01171875f};
  x.resize(32, 0.7f);
  std::vector<uint16_t> out(Bf16RowsElements(1, 32));
  Bf16Rows rows{32, out.data()};
  ConvertRowsBf16(x.data(), 32, 0, 1, &rows);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], Fp32ToBf16(x[i])) << i;
}

// Every call shape (1 and 2 rows in AVX-512, larger ones on the tiles, padded last
// tiles, unaligned column splits, all three weight types) gives the portable reference's
// bits.
TEST_F(Bf16MatmulTest, EqualsTheReferenceBitwise) {
  for (GgmlType type : kTypes) {
    for (int64_t m : {1, 2, 3, 16, 37}) {
      SCOPED_TRACE(GgmlTypeName(static_cast<uint32_t>(type)) + " m=" + std::to_string(m));
      const Problem p = Make(type, 45, 320, m, 21);
      std::vector<float> want(m * p.n, NAN);
      Bf16MatmulReference(Packed(p), p.x.data(), p.k, m, want.data(), p.n, 0, p.n);
      const std::vector<float> got = RunRows(p, 0, m, 3);
      for (size_t e = 0; e < got.size(); ++e) {
        ASSERT_TRUE(SameBits(got[e], want[e])) << e << ": " << got[e] << " vs " << want[e];
      }
    }
  }
}

// Each output against the exact product of the dequantized weights with x, in double:
// two bf16 roundings (weight and activation, 2^-9 relative each) plus fp32 sums.
TEST_F(Bf16MatmulTest, WithinTheBf16RoundingBound) {
  for (GgmlType type : kTypes) {
    SCOPED_TRACE(GgmlTypeName(static_cast<uint32_t>(type)));
    const Problem p = Make(type, 40, 320, 21, 13);
    const std::vector<float> y = RunRows(p, 0, p.m, 1);
    std::vector<float> row(p.k);
    for (int64_t j = 0; j < p.n; ++j) {
      ASSERT_TRUE(DequantizeRow(type, p.raw.data() + j * RowBytes(type, p.k), row.data(), p.k).ok());
      for (int64_t i = 0; i < p.m; ++i) {
        double exact = 0, mag = 0;
        for (int64_t c = 0; c < p.k; ++c) {
          exact += double{row[c]} * p.x[i * p.k + c];
          mag += std::fabs(double{row[c]} * p.x[i * p.k + c]);
        }
        ASSERT_NEAR(y[i * p.n + j], exact, mag * (2.0 / 512 + 1e-5) + 1e-6) << j << " x " << i;
      }
    }
  }
}

// A row's outputs are bitwise the same alone (m = 1, the decode case), in a call of 37
// rows at any position (whole tiles, the padded last tile, two-tile pairs), and with any
// column split (aligned to 16-column panels or not, partial last panel).
TEST_F(Bf16MatmulTest, BatchAndSplitInvariant) {
  for (GgmlType type : kTypes) {
    for (int64_t n : {48, 45}) {
      SCOPED_TRACE(GgmlTypeName(static_cast<uint32_t>(type)) + " n=" + std::to_string(n));
      const Problem p = Make(type, n, 576, 37, 11);
      const std::vector<float> all = RunRows(p, 0, p.m, 1);
      for (int splits : {2, 3, 5}) {
        const std::vector<float> split = RunRows(p, 0, p.m, splits);
        for (size_t e = 0; e < all.size(); ++e) ASSERT_TRUE(SameBits(split[e], all[e])) << e;
      }
      for (int64_t first : {0, 5, 16, 20, 33}) {
        for (int64_t m : {int64_t{1}, p.m - first}) {
          const std::vector<float> part = RunRows(p, first, m, 2);
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < p.n; ++j) {
              ASSERT_TRUE(SameBits(part[i * p.n + j], all[(first + i) * p.n + j]))
                  << "row " << first + i << " col " << j << " (call of " << m << " rows from "
                  << first << ")";
            }
          }
        }
      }
    }
  }
}

// Other rows of the call, even NaN ones, never reach a row's outputs.
TEST_F(Bf16MatmulTest, RowsAreIndependent) {
  Problem p = Make(GgmlType::kQ4_1, 32, 256, 18, 5);
  const std::vector<float> before = RunRows(p, 0, p.m, 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = 0; i < p.m; i += 2) {
    for (int64_t c = 0; c < p.k; ++c) p.x[i * p.k + c] = nan;
  }
  ConvertRowsBf16(p.x.data(), p.k, 0, p.m, &p.rows);
  const std::vector<float> after = RunRows(p, 0, p.m, 1);
  for (int64_t i = 1; i < p.m; i += 2) {
    for (int64_t j = 0; j < p.n; ++j) {
      ASSERT_TRUE(SameBits(after[i * p.n + j], before[i * p.n + j])) << i << " " << j;
    }
  }
}

}  // namespace
}  // namespace weft::kernels

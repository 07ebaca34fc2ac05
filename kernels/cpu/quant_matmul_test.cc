#include "kernels/cpu/quant_matmul.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/ggml_types.h"
#include "gtest/gtest.h"

namespace weft::kernels {
namespace {

// Random bytes of n rows of k weights of `type`, each row `row_stride` bytes apart.
std::vector<uint8_t> RandomWeights(GgmlType type, int64_t n, int64_t k, int64_t row_stride,
                                   std::mt19937* rng) {
  std::uniform_real_distribution<float> val(-1.0f, 1.0f);
  std::uniform_real_distribution<float> scale(0.005f, 0.05f);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> out(n * row_stride);
  auto put16 = [](uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); };
  for (int64_t j = 0; j < n; ++j) {
    uint8_t* row = out.data() + j * row_stride;
    for (int64_t i = 0; i < row_stride; ++i) row[i] = static_cast<uint8_t>(byte(*rng));
    switch (type) {
      case GgmlType::kF32:
        for (int64_t c = 0; c < k; ++c) {
          const float f = val(*rng);
          std::memcpy(row + 4 * c, &f, 4);
        }
        break;
      case GgmlType::kF16:
        for (int64_t c = 0; c < k; ++c) put16(row + 2 * c, Fp32ToFp16(val(*rng)));
        break;
      case GgmlType::kBF16:
        for (int64_t c = 0; c < k; ++c) put16(row + 2 * c, Fp32ToBf16(val(*rng)));
        break;
      case GgmlType::kQ4_0:
        for (int64_t b = 0; b < k / 32; ++b) put16(row + 18 * b, Fp32ToFp16(scale(*rng)));
        break;
      case GgmlType::kQ4_1:
        for (int64_t b = 0; b < k / 32; ++b) {
          put16(row + 20 * b, Fp32ToFp16(scale(*rng)));
          put16(row + 20 * b + 2, Fp32ToFp16(-0.4f * val(*rng)));
        }
        break;
      case GgmlType::kQ8_0:
        for (int64_t b = 0; b < k / 32; ++b) put16(row + 34 * b, Fp32ToFp16(scale(*rng) / 8));
        break;
      default:
        ADD_FAILURE() << "type";
    }
  }
  return out;
}

struct Problem {
  QuantMatrix w;
  std::vector<uint8_t> bytes;
  std::vector<float> x;  // m x ldx
  int64_t m = 0;
  int64_t ldx = 0;
};

Problem MakeProblem(GgmlType type, int64_t n, int64_t k, int64_t m, int64_t extra_stride,
                    uint32_t seed) {
  std::mt19937 rng(seed);
  Problem p;
  const int64_t row_stride = RowBytes(type, k) + extra_stride;
  p.bytes = RandomWeights(type, n, k, row_stride, &rng);
  p.w = QuantMatrix{type, p.bytes.data(), n, k, row_stride};
  p.m = m;
  p.ldx = k + 3;  // rows of X are not packed
  p.x.resize(m * p.ldx);
  std::uniform_real_distribution<float> val(-2.0f, 2.0f);
  for (float& v : p.x) v = val(rng);
  return p;
}

// Naive loops: exact dequantization of the whole row, then a sequential fp32 sum with
// separate multiply and add (the reference's documented arithmetic), plus a double
// sum and the sum of |w*x| to scale tolerances.
struct Naive {
  std::vector<float> seq;
  std::vector<double> exact;
  std::vector<double> magnitude;
};

Naive NaiveMatmul(const Problem& p) {
  Naive out;
  out.seq.resize(p.m * p.w.n);
  out.exact.resize(p.m * p.w.n);
  out.magnitude.resize(p.m * p.w.n);
  std::vector<float> row(p.w.k);
  for (int64_t j = 0; j < p.w.n; ++j) {
    EXPECT_TRUE(DequantizeRow(p.w.type, p.w.data + j * p.w.row_stride, row.data(), p.w.k).ok());
    for (int64_t i = 0; i < p.m; ++i) {
      const float* x = p.x.data() + i * p.ldx;
      volatile float acc = 0.0f;  // volatile: keep every rounding step
      double exact = 0, mag = 0;
      for (int64_t c = 0; c < p.w.k; ++c) {
        const float prod = row[c] * x[c];
        acc = acc + prod;
        exact += static_cast<double>(row[c]) * x[c];
        mag += std::fabs(static_cast<double>(row[c]) * x[c]);
      }
      out.seq[i * p.w.n + j] = acc;
      out.exact[i * p.w.n + j] = exact;
      out.magnitude[i * p.w.n + j] = mag;
    }
  }
  return out;
}

std::vector<float> RunMatmul(MatmulImpl impl, const Problem& p, int num_splits) {
  const int64_t ldy = p.w.n + 5;
  std::vector<float> y(p.m * ldy, NAN);
  for (int s = 0; s < num_splits; ++s) {
    const int64_t b = p.w.n * s / num_splits;
    const int64_t e = p.w.n * (s + 1) / num_splits;
    Matmul(impl, p.w, p.x.data(), p.ldx, p.m, y.data(), ldy, b, e);
  }
  std::vector<float> packed(p.m * p.w.n);
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.w.n; ++j) packed[i * p.w.n + j] = y[i * ldy + j];
  }
  return packed;
}

const GgmlType kTypes[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16,
                           GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0};

TEST(QuantMatmulTest, ReferenceIsTheSequentialSumOfExactWeights) {
  for (GgmlType type : kTypes) {
    SCOPED_TRACE(GgmlTypeName(static_cast<uint32_t>(type)));
    const Problem p = MakeProblem(type, 37, 320, 11, 0, 1);
    const Naive naive = NaiveMatmul(p);
    const std::vector<float> y = RunMatmul(MatmulImpl::kReference, p, 3);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_EQ(y[i], naive.seq[i]) << "output " << i;
    }
  }
}

TEST(QuantMatmulTest, ReferenceHandlesUnalignedFloatRows) {
  const Problem p = MakeProblem(GgmlType::kF16, 5, 45, 3, 6, 2);
  const Naive naive = NaiveMatmul(p);
  const std::vector<float> y = RunMatmul(MatmulImpl::kReference, p, 2);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], naive.seq[i]);
}

TEST(QuantMatmulTest, Avx512MatchesExactSumWithinRounding) {
  for (GgmlType type : kTypes) {
    if (!MatmulSupported(MatmulImpl::kAvx512, type, 320)) GTEST_SKIP() << "no AVX-512";
    SCOPED_TRACE(GgmlTypeName(static_cast<uint32_t>(type)));
    // A K-slice of a wider matrix (extra row stride), odd n, a full tile plus leftovers.
    const Problem p = MakeProblem(type, 41, 320, 13, 40, 3);
    const Naive naive = NaiveMatmul(p);
    const std::vector<float> y = RunMatmul(MatmulImpl::kAvx512, p, 3);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_NEAR(y[i], naive.exact[i], 1e-6 * naive.magnitude[i] + 1e-30) << "output " << i;
    }
  }
}

// Row i of the output depends only on row i of X, whatever else is in the batch and
// however the columns are split (bitwise).
TEST(QuantMatmulTest, BatchInvariantBitwise) {
  for (MatmulImpl impl : {MatmulImpl::kReference, MatmulImpl::kAvx512}) {
    for (GgmlType type : kTypes) {
      if (!MatmulSupported(impl, type, 256)) continue;
      SCOPED_TRACE(std::string(MatmulImplName(impl)) + " " +
                   GgmlTypeName(static_cast<uint32_t>(type)));
      const Problem big = MakeProblem(type, 23, 256, 19, 0, 4);
      const std::vector<float> all = RunMatmul(impl, big, 1);
      for (int64_t m : {1, 2, 3, 5, 8, 9, 12}) {
        for (int64_t first : {int64_t{0}, big.m - m}) {
          Problem sub = big;
          sub.m = m;
          sub.x.assign(big.x.begin() + first * big.ldx, big.x.begin() + (first + m) * big.ldx);
          const std::vector<float> part = RunMatmul(impl, sub, 4);
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < big.w.n; ++j) {
              ASSERT_EQ(part[i * big.w.n + j], all[(first + i) * big.w.n + j])
                  << "m=" << m << " row " << first + i << " col " << j;
            }
          }
        }
      }
    }
  }
}

TEST(QuantMatmulTest, SupportAndBestImpl) {
  EXPECT_TRUE(MatmulSupported(MatmulImpl::kReference, GgmlType::kQ4_1, 64));
  EXPECT_FALSE(MatmulSupported(MatmulImpl::kReference, GgmlType::kQ4_1, 48));
  EXPECT_TRUE(MatmulSupported(MatmulImpl::kReference, GgmlType::kQ5_0, 64));
  EXPECT_TRUE(MatmulSupported(MatmulImpl::kReference, GgmlType::kQ6_K, 512));
  EXPECT_FALSE(MatmulSupported(MatmulImpl::kReference, GgmlType::kQ4_K, 128));
  EXPECT_FALSE(MatmulSupported(MatmulImpl::kReference, GgmlType::kQ2_K, 256));
  EXPECT_FALSE(MatmulSupported(MatmulImpl::kAvx512, GgmlType::kQ4_K, 256));  // no AVX-512 code
  EXPECT_FALSE(MatmulSupported(MatmulImpl::kAvx512, GgmlType::kF32, 40));
  const MatmulImpl best = BestMatmulImpl(GgmlType::kQ4_1, 576);
  EXPECT_TRUE(MatmulSupported(best, GgmlType::kQ4_1, 576));
  EXPECT_EQ(BestMatmulImpl(GgmlType::kF32, 40), MatmulImpl::kReference);
}

}  // namespace
}  // namespace weft::kernels

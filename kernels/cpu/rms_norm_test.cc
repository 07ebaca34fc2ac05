#include "kernels/cpu/rms_norm.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace weft::kernels {
namespace {

TEST(RmsNormTest, MatchesNaiveAndRowsAreIndependent) {
  std::mt19937 rng(1);
  std::normal_distribution<float> val(0.0f, 3.0f);
  for (int64_t dim : {1, 7, 16, 64, 576, 1000}) {
    const int64_t tokens = 5, stride = dim + 3;
    std::vector<float> x(tokens * stride), w(dim);
    for (float& v : x) v = val(rng);
    for (float& v : w) v = val(rng);
    std::vector<float> out(tokens * stride, NAN);
    RmsNorm(x.data(), stride, w.data(), tokens, dim, 1e-5f, out.data(), stride);
    for (int64_t t = 0; t < tokens; ++t) {
      double ss = 0;
      for (int64_t c = 0; c < dim; ++c) ss += double{x[t * stride + c]} * x[t * stride + c];
      const double r = 1.0 / std::sqrt(ss / dim + 1e-5);
      for (int64_t c = 0; c < dim; ++c) {
        const double want = x[t * stride + c] * r * w[c];
        ASSERT_NEAR(out[t * stride + c], want, 1e-5 * std::fabs(want) + 1e-6);
      }
      // One row alone, in place: the same bits.
      std::vector<float> row(x.begin() + t * stride, x.begin() + t * stride + dim);
      RmsNorm(row.data(), dim, w.data(), 1, dim, 1e-5f, row.data(), dim);
      for (int64_t c = 0; c < dim; ++c) ASSERT_EQ(row[c], out[t * stride + c]);
    }
  }
}

}  // namespace
}  // namespace weft::kernels

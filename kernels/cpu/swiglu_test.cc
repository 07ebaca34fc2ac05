#include "kernels/cpu/swiglu.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace weft::kernels {
namespace {

void ExpectMatchesDefinition(ElementwiseImpl impl) {
  std::vector<float> gate, up;
  for (int i = -40; i <= 40; ++i) {
    gate.push_back(i * 0.5f);
    up.push_back(1.5f - i * 0.1f);
  }
  gate.push_back(-200.0f);  // exp(200) overflows to inf: silu -> -0
  up.push_back(2.0f);
  std::vector<float> out(gate.size());
  SwiGlu(impl, gate.data(), up.data(), gate.size(), out.data());
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = gate[i];
    const double want = g / (1.0 + std::exp(-g)) * up[i];
    ASSERT_NEAR(out[i], want, 1e-6 * std::fabs(want) + 1e-30) << g;
  }
  SwiGlu(impl, gate.data(), up.data(), gate.size(), gate.data());  // in place
  for (size_t i = 0; i < gate.size(); ++i) ASSERT_EQ(gate[i], out[i]);
}

TEST(SwiGluTest, ReferenceMatchesDefinition) { ExpectMatchesDefinition(ElementwiseImpl::kReference); }

TEST(SwiGluTest, Avx512MatchesDefinition) {
  if (!ElementwiseSupported(ElementwiseImpl::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  ExpectMatchesDefinition(ElementwiseImpl::kAvx512);
}

// GeGLU against the tanh-form GELU in double, and against the exact erf form (the tanh
// form's own approximation error stays below 1e-3 absolute).
TEST(GeluTanhGluTest, MatchesDefinition) {
  std::vector<float> gate, up;
  for (int i = -60; i <= 60; ++i) {
    gate.push_back(i * 0.25f);
    up.push_back(0.5f + i * 0.05f);
  }
  std::vector<float> out(gate.size());
  GeluTanhGlu(gate.data(), up.data(), gate.size(), out.data());
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = gate[i];
    const double tanh_form =
        0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g))) * up[i];
    const double erf_form = 0.5 * g * (1.0 + std::erf(g / std::sqrt(2.0))) * up[i];
    ASSERT_NEAR(out[i], tanh_form, 2e-6 * std::fabs(tanh_form) + 1e-7) << g;
    ASSERT_NEAR(out[i], erf_form, 1e-3 * std::fabs(up[i]) + 1e-6) << g;
  }
  EXPECT_EQ(out[60], 0.0f);  // gelu(0) = 0
}

}  // namespace
}  // namespace weft::kernels

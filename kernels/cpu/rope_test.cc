#include "kernels/cpu/rope.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace weft::kernels {
namespace {

constexpr float kBase = 100000.0f;

std::vector<float> RandomRows(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = val(rng);
  return x;
}

TEST(RopeTest, NormalRotatesAdjacentPairs) {
  const int32_t heads = 3, hd = 64, rot = 48;  // partial rotation: dims 48..63 untouched
  const std::vector<int32_t> pos = {0, 1, 17, 8191};
  const std::vector<float> x = RandomRows(pos.size() * heads * hd, 1);
  std::vector<float> cs(pos.size() * rot);
  RopeCosSin(pos.data(), pos.size(), rot, kBase, cs.data());
  std::vector<float> y = x;
  ApplyRope(RopeStyle::kNormal, cs.data(), rot, y.data(), heads * hd, pos.size(), heads, hd);
  for (size_t t = 0; t < pos.size(); ++t) {
    for (int32_t h = 0; h < heads; ++h) {
      const float* a = x.data() + (t * heads + h) * hd;
      const float* b = y.data() + (t * heads + h) * hd;
      for (int32_t i = 0; i < rot / 2; ++i) {
        const double th = pos[t] * std::pow(double{kBase}, -2.0 * i / rot);
        const double c = std::cos(th), s = std::sin(th);
        ASSERT_NEAR(b[2 * i], a[2 * i] * c - a[2 * i + 1] * s, 2e-6);
        ASSERT_NEAR(b[2 * i + 1], a[2 * i] * s + a[2 * i + 1] * c, 2e-6);
      }
      for (int32_t d = rot; d < hd; ++d) ASSERT_EQ(b[d], a[d]);
    }
  }
}

// llama.cpp's converter permutes each head's Q/K rows: HF dim i (< hd/2) becomes 2i and
// HF dim i + hd/2 becomes 2i + 1. Normal RoPE on permuted rows == NeoX RoPE on HF rows.
TEST(RopeTest, NormalOnPermutedEqualsNeoxOnUnpermuted) {
  const int32_t heads = 2, hd = 16;
  const std::vector<int32_t> pos = {3, 250};
  const std::vector<float> hf = RandomRows(pos.size() * heads * hd, 2);
  std::vector<float> perm(hf.size());
  for (size_t r = 0; r < pos.size() * heads; ++r) {
    for (int32_t i = 0; i < hd / 2; ++i) {
      perm[r * hd + 2 * i] = hf[r * hd + i];
      perm[r * hd + 2 * i + 1] = hf[r * hd + hd / 2 + i];
    }
  }
  std::vector<float> cs(pos.size() * hd);
  RopeCosSin(pos.data(), pos.size(), hd, kBase, cs.data());
  std::vector<float> neox = hf;
  ApplyRope(RopeStyle::kNeox, cs.data(), hd, neox.data(), heads * hd, pos.size(), heads, hd);
  ApplyRope(RopeStyle::kNormal, cs.data(), hd, perm.data(), heads * hd, pos.size(), heads, hd);
  for (size_t r = 0; r < pos.size() * heads; ++r) {
    for (int32_t i = 0; i < hd / 2; ++i) {
      ASSERT_EQ(perm[r * hd + 2 * i], neox[r * hd + i]);
      ASSERT_EQ(perm[r * hd + 2 * i + 1], neox[r * hd + hd / 2 + i]);
    }
  }
}

// Linear scaling multiplies every angle by freq_scale; Llama 3's factors divide pair i's
// frequency by factor[i]. Without either, the table is the plain one bit for bit.
TEST(RopeTest, ScalingAndFrequencyFactors) {
  const int32_t rot = 8;
  const std::vector<int32_t> pos = {0, 5, 1000};
  const float factors[rot / 2] = {1.0f, 2.0f, 4.5f, 8.0f};
  double plain[rot / 2], scaled[rot / 2], with_factors[rot / 2];
  RopeInvFreq(kBase, rot, 1.0f, nullptr, plain);
  RopeInvFreq(kBase, rot, 0.25f, nullptr, scaled);
  RopeInvFreq(kBase, rot, 1.0f, factors, with_factors);
  for (int32_t i = 0; i < rot / 2; ++i) {
    EXPECT_EQ(plain[i], std::pow(double{kBase}, -2.0 * i / rot));
    EXPECT_EQ(scaled[i], plain[i] * 0.25);
    EXPECT_EQ(with_factors[i], plain[i] / factors[i]);
  }
  std::vector<float> a(pos.size() * rot), b(pos.size() * rot), c(pos.size() * rot);
  RopeCosSin(pos.data(), pos.size(), rot, kBase, a.data());
  RopeCosSin(pos.data(), pos.size(), rot, plain, b.data());
  EXPECT_EQ(a, b);
  RopeCosSin(pos.data(), pos.size(), rot, with_factors, c.data());
  const double th = 1000.0 * plain[3] / 8.0;
  EXPECT_EQ(c[2 * rot + 3], static_cast<float>(std::cos(th)));
  EXPECT_EQ(c[2 * rot + rot / 2 + 3], static_cast<float>(std::sin(th)));
}

}  // namespace
}  // namespace weft::kernels

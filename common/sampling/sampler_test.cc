#include "common/sampling/sampler.h"

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Random123's known-answer vectors for philox4x32_10.
TEST(PhiloxTest, KnownAnswers) {
  auto philox = [](sampling::Philox4x32 c, uint32_t k0, uint32_t k1) {
    const sampling::Philox4x32 x = sampling::Philox4x32_10(c, k0, k1);
    return std::vector<uint32_t>(x.w, x.w + 4);
  };
  EXPECT_EQ(philox({{0, 0, 0, 0}}, 0, 0),
            (std::vector<uint32_t>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox({{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff),
            (std::vector<uint32_t>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0),
            (std::vector<uint32_t>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(PhiloxTest, UniformFollowsTheContract) {
  const uint64_t seed = 0x0123456789abcdefull;
  const sampling::Philox4x32 x = sampling::Philox4x32_10({{3, 17, 0, 0}}, 0x89abcdef, 0x01234567);
  EXPECT_EQ(sampling::Uniform(seed, 3, 17), static_cast<float>(x.w[0] >> 8) / 16777216.0f);
  for (uint32_t i = 0; i < 1000; ++i) {
    const float u = sampling::Uniform(42, 0, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
  }
  EXPECT_NE(sampling::Uniform(42, 0, 5), sampling::Uniform(42, 1, 5));
  EXPECT_NE(sampling::Uniform(42, 0, 5), sampling::Uniform(43, 0, 5));
  EXPECT_EQ(sampling::Uniform(0, 0, 0), static_cast<float>(0x6627e8d5u >> 8) / 16777216.0f);
}

SamplerParams Greedy() {
  SamplerParams p;
  p.temperature = 0.0f;
  return p;
}

int32_t SampleToken(Sampler* s, const SamplerParams& p, const std::vector<float>& logits,
                    const std::vector<int32_t>& prompt = {},
                    const std::vector<int32_t>& output = {}) {
  SampleResult r;
  const absl::Status st = s->Sample(p, logits, prompt, output, &r);
  EXPECT_TRUE(st.ok()) << st;
  return r.token;
}

TEST(SamplerTest, GreedyTakesArgmaxWithLowestIdOnTiesAndIgnoresNaN) {
  Sampler s(6);
  EXPECT_EQ(SampleToken(&s, Greedy(), {0.1f, 2.0f, -1.0f, 2.0f, 1.9f, 0.0f}), 1);
  EXPECT_EQ(SampleToken(&s, Greedy(), {NAN, -kInf, -3.0f, NAN, -5.0f, -4.0f}), 2);
}

// Greedy without penalties takes a shortcut on the raw logits; it must pick what the
// general path picks (which copies, applies penalties — none here — and takes Greedy()).
TEST(SamplerTest, GreedyShortcutAgreesWithTheGeneralPath) {
  std::mt19937 rng(3);
  for (int32_t vocab : {1, 7, 8, 1003, 49152}) {
    Sampler s(vocab);
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<float> logits(vocab);
      std::uniform_int_distribution<int> level(0, 20);
      for (float& x : logits) x = static_cast<float>(level(rng)) * 0.5f;  // many ties
      for (int i = 0; i < vocab / 10; ++i) logits[rng() % vocab] = NAN;
      for (int i = 0; i < vocab / 10; ++i) logits[rng() % vocab] = -kInf;
      if (trial % 7 == 0) std::fill(logits.begin(), logits.end(), -kInf);
      SamplerParams general = Greedy();
      general.frequency_penalty = 0.5f;  // forces the general path; no history to apply it to
      SampleResult a, b;
      const absl::Status sa = s.Sample(Greedy(), logits, {}, {}, &a);
      const absl::Status sb = s.Sample(general, logits, {}, {}, &b);
      ASSERT_EQ(sa.ok(), sb.ok()) << "vocab " << vocab << " trial " << trial;
      if (sa.ok()) {
        ASSERT_EQ(a.token, b.token) << "vocab " << vocab << " trial " << trial;
      }
    }
  }
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  Sampler s(4);
  SamplerParams p = Greedy();
  p.repetition_penalty = 2.0f;
  // Token 0 (3.0, seen in the prompt) becomes 1.5 < 2.0: token 1 wins.
  EXPECT_EQ(SampleToken(&s, p, {3.0f, 2.0f, -1.0f, -1.5f}, {0}), 1);
  // Negative logits get more negative: -1.0 (seen) becomes -2.0 < -1.5.
  EXPECT_EQ(SampleToken(&s, p, {-9.0f, -9.0f, -1.0f, -1.5f}, {2}, {}), 3);
  // Applied once per distinct token, whatever the count.
  EXPECT_EQ(SampleToken(&s, p, {3.0f, 1.4f, 0.0f, 0.0f}, {0, 0}, {0, 0, 0}), 0);
}

TEST(SamplerTest, PresenceAndFrequencyPenaltiesSeeOutputTokensOnly) {
  Sampler s(3);
  SamplerParams p = Greedy();
  p.presence_penalty = 1.0f;
  const std::vector<float> logits = {2.0f, 1.5f, 0.0f};
  EXPECT_EQ(SampleToken(&s, p, logits, {0, 0, 0}, {}), 0);   // prompt only: no effect
  EXPECT_EQ(SampleToken(&s, p, logits, {}, {0}), 1);         // 2.0 - 1 < 1.5
  p.presence_penalty = 0.0f;
  p.frequency_penalty = 0.3f;
  EXPECT_EQ(SampleToken(&s, p, logits, {}, {0}), 0);         // 1.7 > 1.5
  EXPECT_EQ(SampleToken(&s, p, logits, {}, {0, 0}), 1);      // 1.4 < 1.5
  EXPECT_EQ(SampleToken(&s, p, logits, {0, 0, 0}, {1}), 0);  // scratch state was reset
}

// Empirical frequencies of `draws` samples, varying sample_index (the Philox counter).
std::vector<double> Frequencies(const SamplerParams& base, const std::vector<float>& logits,
                                int draws) {
  Sampler s(static_cast<int32_t>(logits.size()));
  std::vector<double> freq(logits.size());
  for (int j = 0; j < draws; ++j) {
    SamplerParams p = base;
    p.sample_index = j;
    freq[SampleToken(&s, p, logits)] += 1.0 / draws;
  }
  return freq;
}

const std::vector<float> kLogits = {std::log(0.5f), std::log(0.3f), std::log(0.15f),
                                    std::log(0.05f)};

TEST(SamplerTest, DistributionMatchesSoftmax) {
  SamplerParams p;
  p.seed = 1234;
  const std::vector<double> f = Frequencies(p, kLogits, 20000);
  const double want[] = {0.5, 0.3, 0.15, 0.05};
  for (int t = 0; t < 4; ++t) {
    const double sigma = std::sqrt(want[t] * (1 - want[t]) / 20000);
    EXPECT_NEAR(f[t], want[t], 5 * sigma) << "token " << t;
  }
  p.temperature = 0.5f;  // p ~ p^2: 0.25, 0.09, 0.0225, 0.0025 normalised
  const std::vector<double> g = Frequencies(p, kLogits, 20000);
  EXPECT_NEAR(g[0], 0.25 / 0.365, 0.02);
  EXPECT_NEAR(g[3], 0.0025 / 0.365, 0.004);
}

TEST(SamplerTest, TopKTopPAndMinPRestrictTheCandidates) {
  SamplerParams p;
  p.seed = 7;
  p.top_k = 2;
  std::vector<double> f = Frequencies(p, kLogits, 4000);
  EXPECT_EQ(f[2] + f[3], 0.0);
  EXPECT_NEAR(f[0], 0.5 / 0.8, 0.04);
  p.top_k = 0;
  p.top_p = 0.75f;  // 0.5 < 0.75 <= 0.8: keeps tokens 0 and 1
  f = Frequencies(p, kLogits, 4000);
  EXPECT_EQ(f[2] + f[3], 0.0);
  EXPECT_GT(f[1], 0.3);
  p.top_p = 0.4f;  // the top token alone reaches it
  f = Frequencies(p, kLogits, 200);
  EXPECT_NEAR(f[0], 1.0, 1e-9);
  p.top_p = 1.0f;
  p.min_p = 0.35f;  // relative weights 1, 0.6, 0.3, 0.1: keeps 0 and 1
  f = Frequencies(p, kLogits, 4000);
  EXPECT_EQ(f[2] + f[3], 0.0);
  EXPECT_NEAR(f[0], 0.5 / 0.8, 0.04);
  p.min_p = 0.0f;
  p.top_k = 1;  // top-1 is greedy whatever the draw
  f = Frequencies(p, {0.0f, 1.0f, 1.0f, 0.5f}, 200);
  EXPECT_NEAR(f[1], 1.0, 1e-9);  // tie at the top: lower id
}

// The draw is the inverse CDF over tokens sorted by probability (ties: lower id) at
// u = sampling::Uniform(seed, j, i), with i = the number of output tokens so far.
TEST(SamplerTest, InverseCdfAtThePhiloxUniform) {
  const std::vector<float> logits = {0.0f, 1.0f, 0.0f, 2.0f, 1.0f};  // ties 0/2 and 1/4
  std::vector<double> w(5);
  double z = 0;
  for (int t = 0; t < 5; ++t) z += (w[t] = std::exp(logits[t] - 2.0));
  const int order[] = {3, 1, 4, 0, 2};
  Sampler s(5);
  const std::vector<int32_t> output = {1, 3};
  for (uint64_t seed = 0; seed < 300; ++seed) {
    SamplerParams p;
    p.seed = seed;
    p.sample_index = 2;
    const double u = sampling::Uniform(seed, 2, 2) * z;
    double cum = 0;
    int want = order[4];
    for (int t : order) {
      cum += w[t];
      if (cum > u) {
        want = t;
        break;
      }
    }
    ASSERT_EQ(SampleToken(&s, p, logits, {}, output), want) << "seed " << seed;
  }
}

TEST(SamplerTest, SeededDeterminism) {
  std::vector<float> logits(1000);
  for (int t = 0; t < 1000; ++t) logits[t] = std::sin(t * 0.37f) * 3;
  SamplerParams p;
  p.seed = 99;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  Sampler a(1000), b(1000);
  std::vector<int32_t> out_a, out_b;
  for (int i = 0; i < 50; ++i) {
    out_a.push_back(SampleToken(&a, p, logits, {}, out_a));
    // b is used for something else in between: no hidden state.
    SamplerParams other = p;
    other.seed = 5;
    SampleToken(&b, other, logits, {1, 2}, {});
    out_b.push_back(SampleToken(&b, p, logits, {}, out_b));
  }
  EXPECT_EQ(out_a, out_b);
  p.sample_index = 1;
  std::vector<int32_t> out_c;
  for (int i = 0; i < 50; ++i) out_c.push_back(SampleToken(&a, p, logits, {}, out_c));
  EXPECT_NE(out_a, out_c);
}

TEST(SamplerTest, LogprobsOfRawLogits) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, -2.0f, NAN};
  double z = 0;
  for (float l : {1.0f, 3.0f, 3.0f, -2.0f}) z += std::exp(double{l});
  SamplerParams p;
  p.temperature = 0.3f;            // not seen by logprobs
  p.repetition_penalty = 1.7f;     // nor this
  p.num_logprobs = 3;
  Sampler s(5);
  SampleResult r;
  ASSERT_TRUE(s.Sample(p, logits, {1}, {}, &r).ok());
  EXPECT_NEAR(r.logprob, logits[r.token] - std::log(z), 1e-6);
  ASSERT_EQ(r.top_logprobs.size(), 3u);
  EXPECT_EQ(r.top_logprobs[0].token, 1);
  EXPECT_EQ(r.top_logprobs[1].token, 2);
  EXPECT_EQ(r.top_logprobs[2].token, 0);
  EXPECT_NEAR(r.top_logprobs[2].logprob, 1.0 - std::log(z), 1e-6);
  p.num_logprobs = -1;
  ASSERT_TRUE(s.Sample(p, logits, {}, {}, &r).ok());
  EXPECT_TRUE(r.top_logprobs.empty());
}

TEST(SamplerTest, RejectsBadInput) {
  Sampler s(4);
  SampleResult r;
  const std::vector<float> logits = {0, 1, 2, 3};
  SamplerParams p;
  EXPECT_FALSE(s.Sample(p, {0, 1, 2}, {}, {}, &r).ok());
  EXPECT_FALSE(s.Sample(p, logits, {4}, {}, &r).ok());
  EXPECT_FALSE(s.Sample(p, logits, {}, {-1}, &r).ok());
  EXPECT_FALSE(s.Sample(p, {-kInf, NAN, -kInf, -kInf}, {}, {}, &r).ok());
  EXPECT_FALSE(s.Sample(Greedy(), {-kInf, NAN, -kInf, -kInf}, {}, {}, &r).ok());
  p.num_logprobs = 5;  // over the vocabulary
  EXPECT_FALSE(s.Sample(p, logits, {}, {}, &r).ok());
  p = SamplerParams();
  p.sample_index = -1;
  EXPECT_FALSE(s.Sample(p, logits, {}, {}, &r).ok());
}

// Structured output: a masked token is exactly a -inf logit (same bits, every
// setting), across calls with and without a mask on the same Sampler.
TEST(SamplerTest, TokenMaskIsTheSameAsMinusInfinityLogits) {
  constexpr int32_t kVocab = 70;  // three mask words, the last one partial
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  Sampler s(kVocab);
  for (int round = 0; round < 40; ++round) {
    std::vector<float> logits(kVocab);
    for (float& l : logits) l = normal(rng);
    std::string mask(sampling::MaskBytes(kVocab), '\0');
    std::vector<float> minus_inf = logits;
    for (int32_t t = 0; t < kVocab; ++t) {
      if (rng() % 3 == 0 || t == round) {
        mask[t / 8] = static_cast<char>(mask[t / 8] | (1 << (t % 8)));
      } else {
        minus_inf[t] = -kInf;
      }
    }
    SamplerParams p;
    p.seed = 1000 + round;
    p.temperature = round % 4 == 0 ? 0.0f : 0.8f;
    p.top_k = round % 3 == 0 ? 5 : 0;
    p.top_p = round % 5 == 0 ? 0.9f : 1.0f;
    p.repetition_penalty = round % 2 == 0 ? 1.3f : 1.0f;
    const std::vector<int32_t> prompt = {1, 2, 3}, output = {4, 5};
    SampleResult masked, reference;
    ASSERT_TRUE(s.Sample(p, logits, prompt, output, &masked, mask).ok());
    ASSERT_TRUE(s.Sample(p, minus_inf, prompt, output, &reference).ok());
    EXPECT_EQ(masked.token, reference.token) << "round " << round;
    EXPECT_TRUE(sampling::MaskAllows(reinterpret_cast<const uint8_t*>(mask.data()), masked.token));
    // Unmasked in between: no state carried over from the masked call.
    SampleResult free_run;
    ASSERT_TRUE(s.Sample(Greedy(), logits, {}, {}, &free_run).ok());
    int32_t argmax = 0;
    for (int32_t t = 1; t < kVocab; ++t) argmax = logits[t] > logits[argmax] ? t : argmax;
    EXPECT_EQ(free_run.token, argmax);
  }
}

TEST(SamplerTest, TokenMaskOfTheWrongSizeOrAllowingNothingIsRefused) {
  Sampler s(40);
  std::vector<float> logits(40, 1.0f);
  SampleResult r;
  EXPECT_EQ(s.Sample(Greedy(), logits, {}, {}, &r, std::string(4, '\xff')).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Sample(Greedy(), logits, {}, {}, &r, std::string(8, '\0')).code(),
            absl::StatusCode::kInvalidArgument);
  std::string only_39(8, '\0');
  only_39[39 / 8] = static_cast<char>(1 << (39 % 8));
  ASSERT_TRUE(s.Sample(Greedy(), logits, {}, {}, &r, only_39).ok());
  EXPECT_EQ(r.token, 39);
}

}  // namespace
}  // namespace weft

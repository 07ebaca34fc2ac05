// The host half of device sampling, without a GPU: sampling_math.h's weights are
// floor(2^31 exp(x)) to within one unit, and a host
// replay of the CUDA kernel's algorithm (testing/sampling_emulation.h: radix descents,
// chunked tie scans, exact integer sums) draws exactly the host Sampler's token over
// thousands of rows — random logits, exact ties, near-ties a few ulps apart, NaN and
// -inf entries, every sampling parameter alone and combined, several vocabularies
// including the default model's 49152. The GPU test (sampling_test) then only has to
// show that the kernel is this algorithm.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "common/sampling/sampler.h"
#include "common/sampling/sampling_math.h"
#include "kernels/cuda/testing/sampling_emulation.h"

namespace weft::kernels::cuda {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(SamplingMathTest, WeightIsTheScaledExponential) {
  EXPECT_EQ(sampling::Weight(0.0f), sampling::kWeightOne);
  EXPECT_EQ(sampling::Weight(-0.0f), sampling::kWeightOne);
  EXPECT_EQ(sampling::Weight(-kInf), 0u);
  EXPECT_EQ(sampling::Weight(std::numeric_limits<float>::quiet_NaN()), 0u);
  EXPECT_EQ(sampling::Weight(-22.5f), 0u);
  EXPECT_GT(sampling::Weight(-21.0f), 0u);  // exp(-21) * 2^31 = 1.6
  // Within one unit of floor(2^31 exp(x)) (long double exp as the judge), and never
  // above the top weight.
  int64_t off = 0;
  for (float x = -22.0f; x < 0.0f; x = std::nextafter(x, 0.0f) + 1.2345e-4f) {
    const long double want = std::floor(std::exp(static_cast<long double>(x)) * 2147483648.0L);
    const uint32_t got = sampling::Weight(x);
    ASSERT_LE(std::fabs(static_cast<long double>(got) - want), 1.0L) << x;
    ASSERT_LE(got, sampling::kWeightOne);
    off += static_cast<long double>(got) != want ? 1 : 0;
  }
  EXPECT_LT(off, 200) << "the polynomial is accurate to ~1e-15: mismatches are rare";
  // (Monotonicity is not needed: the sorted order is defined by W itself.)
  EXPECT_GT(sampling::Weight(-1e-6f), sampling::Weight(-1e-3f));
}

TEST(SamplingMathTest, ThresholdsAreSingleRoundings) {
  const uint64_t z = (uint64_t{1} << 40) + 12345;
  EXPECT_EQ(sampling::TopPTarget(0.5f, z), static_cast<double>(z) * 0.5);
  EXPECT_TRUE(sampling::TopPReached(z, sampling::TopPTarget(1.0f, z)));
  EXPECT_FALSE(sampling::DrawReached(0, sampling::DrawTarget(0.0f, z)));
  EXPECT_TRUE(sampling::DrawReached(1, sampling::DrawTarget(0.0f, z)));
  EXPECT_TRUE(sampling::MinPKeeps(sampling::kWeightOne, 1.0f));
  EXPECT_FALSE(sampling::MinPKeeps(sampling::kWeightOne / 2 - 1, 0.5f));
  EXPECT_TRUE(sampling::MinPKeeps(sampling::kWeightOne / 2, 0.5f));
}

struct Row {
  std::vector<float> logits;
  std::vector<int32_t> prompt, output;
  SamplerParams params;
};

sampling::RowParams DeviceParams(const Row& r) {
  return ToRowParams(r.params, static_cast<int32_t>(r.prompt.size()),
                             static_cast<int32_t>(r.output.size()));
}

const std::vector<SamplerParams>& Kinds() {
  static const std::vector<SamplerParams> kinds = [] {
    std::vector<SamplerParams> k;
    auto add = [&](auto f) {
      SamplerParams p;
      f(p);
      k.push_back(p);
    };
    add([](SamplerParams& p) { p.temperature = 0; });
    add([](SamplerParams&) {});
    add([](SamplerParams& p) { p.temperature = 0.7f, p.top_k = 1; });
    add([](SamplerParams& p) { p.temperature = 0.8f, p.top_k = 5; });
    add([](SamplerParams& p) { p.temperature = 1.3f, p.top_k = 50; });
    add([](SamplerParams& p) { p.top_p = 0.5f; });
    add([](SamplerParams& p) { p.temperature = 0.9f, p.top_p = 0.95f; });
    add([](SamplerParams& p) { p.min_p = 0.05f; });
    add([](SamplerParams& p) { p.top_k = 40, p.top_p = 0.9f, p.min_p = 0.02f; });
    add([](SamplerParams& p) { p.repetition_penalty = 1.3f, p.temperature = 0; });
    add([](SamplerParams& p) {
      p.repetition_penalty = 0.8f, p.presence_penalty = 0.5f, p.frequency_penalty = 0.25f;
    });
    add([](SamplerParams& p) { p.frequency_penalty = -1.5f, p.top_k = 3; });
    add([](SamplerParams& p) { p.top_p = 1e-6f; });
    add([](SamplerParams& p) { p.temperature = 2.5f, p.top_p = 0.99f; });
    add([](SamplerParams& p) { p.temperature = 0.05f; });
    add([](SamplerParams& p) { p.min_p = 1.0f; });
    add([](SamplerParams& p) { p.top_k = 7, p.min_p = 0.5f, p.temperature = 0.4f; });
    return k;
  }();
  return kinds;
}

enum class Logits { kNormal, kCoarse, kNearTies, kFlat };

std::vector<Row> MakeRows(int32_t vocab, int32_t n, uint32_t seed, Logits style) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> val(0.0f, 3.0f);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  std::vector<Row> rows;
  for (int32_t i = 0; i < n; ++i) {
    Row r;
    r.params = Kinds()[(i + seed) % Kinds().size()];
    r.params.seed = (uint64_t{rng()} << 32) | rng();
    r.params.sample_index = static_cast<int32_t>(rng() % 4);
    r.logits.resize(vocab);
    const float base = val(rng);
    for (float& x : r.logits) {
      switch (style) {
        case Logits::kNormal:
          x = val(rng);
          break;
        case Logits::kCoarse:  // many exact ties
          x = std::round(val(rng) * 2.0f) / 2.0f;
          break;
        case Logits::kNearTies: {  // clusters of values a few ulps apart
          x = base + std::round(val(rng)) * 0.25f;
          for (uint32_t k = rng() % 4; k > 0; --k) x = std::nextafter(x, kInf);
          break;
        }
        case Logits::kFlat:  // everything within a few nats: large candidate sets
          x = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
          break;
      }
    }
    if (i % 5 == 1) r.logits[tok(rng)] = std::numeric_limits<float>::quiet_NaN();
    if (i % 7 == 2) r.logits[tok(rng)] = -kInf;
    for (int32_t j = 0; j < static_cast<int32_t>(rng() % 20); ++j) r.prompt.push_back(tok(rng));
    for (int32_t j = 0; j < static_cast<int32_t>(rng() % 30); ++j) r.output.push_back(tok(rng));
    rows.push_back(std::move(r));
  }
  return rows;
}

// Host Sampler vs the kernel's algorithm, row by row.
void ExpectSameTokens(const std::vector<Row>& rows, int32_t vocab) {
  Sampler sampler(vocab);
  int checked = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    SampleResult res;
    const absl::Status s = sampler.Sample(r.params, r.logits, r.prompt, r.output, &res);
    const int32_t want = s.ok() ? res.token : -1;
    std::vector<int32_t> history = r.prompt;
    history.insert(history.end(), r.output.begin(), r.output.end());
    const int32_t got = testing::EmulateDeviceSample(DeviceParams(r), r.logits, history);
    ASSERT_EQ(got, want) << "row " << i << " vocab " << vocab << " seed " << r.params.seed
                         << " kind " << (i % Kinds().size());
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(rows.size()));
}

TEST(SamplingEmulationTest, MatchesHostSamplerOnRandomLogits) {
  for (int32_t vocab : {7, 100, 1000, 3000}) {
    ExpectSameTokens(MakeRows(vocab, 400, 17 + vocab, Logits::kNormal), vocab);
  }
}

TEST(SamplingEmulationTest, MatchesHostSamplerOnTiesAndNearTies) {
  for (int32_t vocab : {50, 1000, 3000}) {
    ExpectSameTokens(MakeRows(vocab, 300, 3 + vocab, Logits::kCoarse), vocab);
    ExpectSameTokens(MakeRows(vocab, 300, 5 + vocab, Logits::kNearTies), vocab);
    ExpectSameTokens(MakeRows(vocab, 200, 9 + vocab, Logits::kFlat), vocab);
  }
}

TEST(SamplingEmulationTest, MatchesHostSamplerAtTheDefaultModelsVocabulary) {
  ExpectSameTokens(MakeRows(49152, 40, 23, Logits::kNormal), 49152);
  ExpectSameTokens(MakeRows(49152, 20, 29, Logits::kFlat), 49152);
  ExpectSameTokens(MakeRows(49152, 20, 31, Logits::kCoarse), 49152);
}

TEST(SamplingEmulationTest, EveryPhiloxCounterOfOneRequest) {
  // One request's samples and steps: only the counter changes; the draws must follow.
  std::vector<Row> rows = MakeRows(500, 1, 3, Logits::kFlat);
  rows[0].params = SamplerParams();
  rows[0].params.seed = 42;
  std::vector<Row> many;
  for (int32_t j = 0; j < 4; ++j) {
    for (int32_t i = 0; i < 64; ++i) {
      Row r = rows[0];
      r.params.sample_index = j;
      r.output.assign(i, 1);
      many.push_back(r);
    }
  }
  ExpectSameTokens(many, 500);
}

TEST(SamplingEmulationTest, NoFiniteLogitGivesMinusOne) {
  Row r;
  r.logits.assign(100, -kInf);
  r.logits[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(testing::EmulateDeviceSample(DeviceParams(r), r.logits, {}), -1);
  r.params.temperature = 0;
  EXPECT_EQ(testing::EmulateDeviceSample(DeviceParams(r), r.logits, {}), -1);
}

}  // namespace
}  // namespace weft::kernels::cuda

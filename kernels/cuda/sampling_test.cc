// The device sampler against its CPU twin (common/sampling/sampler.h) on random logits: greedy,
// temperature, top-k, top-p, min-p and penalties alone and combined, ties (coarse
// logits), NaN and -inf entries, a row with no finite logit, several samples of one
// request (Philox counters), near-ties a few ulps apart, flat distributions, and a
// vocabulary of the default model's size. Tokens must be identical (by construction:
// common/sampling/sampling_math.h; sampling_host_test checks the algorithm without a GPU).
#include "kernels/cuda/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/testing/cuda_test_util.h"
#include "common/sampling/sampler.h"

namespace weft::kernels::cuda {
namespace {

using testing::DeviceArray;

struct Row {
  std::vector<float> logits;
  std::vector<int32_t> prompt, output;
  SamplerParams params;
};

std::vector<int32_t> CpuTokens(const std::vector<Row>& rows, int32_t vocab) {
  Sampler sampler(vocab);
  std::vector<int32_t> out;
  for (const Row& r : rows) {
    SampleResult res;
    const absl::Status s = sampler.Sample(r.params, r.logits, r.prompt, r.output, &res);
    out.push_back(s.ok() ? res.token : -1);
  }
  return out;
}

// Row i's count row (i) is built from its history by UpdateCounts, then sampled; each
// count row must then hold its history plus the token sampled.
std::vector<int32_t> GpuTokens(const std::vector<Row>& rows, int32_t vocab) {
  const int32_t n = static_cast<int32_t>(rows.size());
  std::vector<float> logits;
  std::vector<sampling::RowParams> params;
  std::vector<int32_t> zero, marks, count_rows;
  for (int32_t i = 0; i < n; ++i) {
    const Row& r = rows[i];
    logits.insert(logits.end(), r.logits.begin(), r.logits.end());
    params.push_back(ToRowParams(r.params, static_cast<int32_t>(r.prompt.size()),
                                 static_cast<int32_t>(r.output.size())));
    zero.push_back(i);
    count_rows.push_back(i);
    for (int32_t t : r.prompt) marks.insert(marks.end(), {i, t, 0});
    for (int32_t t : r.output) marks.insert(marks.end(), {i, t, 1});
  }
  const int32_t num_marks = static_cast<int32_t>(marks.size() / 3);
  if (marks.empty()) marks.assign(3, 0);  // never an empty array (num_marks says 0)
  DeviceArray<float> dlogits(logits), work(int64_t{n} * vocab);
  DeviceArray<sampling::RowParams> dparams(params);
  DeviceArray<int32_t> dzero(zero), dmarks(marks), drows(count_rows);
  DeviceArray<int32_t> counts(int64_t{n} * vocab), tokens(n);
  counts.FillBytes(0x5a);  // garbage: UpdateCounts zeroes the rows
  CountUpdate u;
  u.counts = counts.get();
  u.vocab = vocab;
  u.zero_rows = dzero.get();
  u.num_zero = n;
  u.marks = dmarks.get();
  u.num_marks = num_marks;
  WEFT_EXPECT_CUDA_OK(UpdateCounts(u, nullptr));
  SampleArgs a;
  a.logits = dlogits.get();
  a.logits_stride = vocab;
  a.num_rows = n;
  a.vocab = vocab;
  a.params = dparams.get();
  a.work = work.get();
  a.counts = counts.get();
  a.count_rows = drows.get();
  a.tokens = tokens.get();
  WEFT_EXPECT_CUDA_OK(SampleTokens(a, nullptr));
  const std::vector<int32_t> got = tokens.ToHost();
  const std::vector<int32_t> c = counts.ToHost();
  for (int32_t i = 0; i < n; ++i) {
    std::vector<int32_t> want(vocab, 0);
    for (int32_t t : rows[i].prompt) want[t] |= kCountSeen;
    std::vector<int32_t> output = rows[i].output;
    if (got[i] >= 0) output.push_back(got[i]);
    for (int32_t t : output) want[t] = ((want[t] & (kCountSeen - 1)) + 1) | kCountSeen;
    EXPECT_TRUE(std::equal(want.begin(), want.end(), c.begin() + int64_t{i} * vocab))
        << "count row " << i;
  }
  return got;
}

enum class Style { kNormal, kCoarse, kNearTies, kFlat };

std::vector<Row> MakeRows(int32_t vocab, int32_t n, uint32_t seed, Style style) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> val(0.0f, 3.0f);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  const SamplerParams kinds[] = {
      [] { SamplerParams p; p.temperature = 0; return p; }(),
      [] { SamplerParams p; return p; }(),
      [] { SamplerParams p; p.temperature = 0.7f; p.top_k = 1; return p; }(),
      [] { SamplerParams p; p.temperature = 0.8f; p.top_k = 5; return p; }(),
      [] { SamplerParams p; p.temperature = 1.3f; p.top_k = 50; return p; }(),
      [] { SamplerParams p; p.top_p = 0.5f; return p; }(),
      [] { SamplerParams p; p.temperature = 0.9f; p.top_p = 0.95f; return p; }(),
      [] { SamplerParams p; p.min_p = 0.05f; return p; }(),
      [] { SamplerParams p; p.top_k = 40; p.top_p = 0.9f; p.min_p = 0.02f; return p; }(),
      [] { SamplerParams p; p.repetition_penalty = 1.3f; p.temperature = 0; return p; }(),
      [] { SamplerParams p; p.repetition_penalty = 0.8f; p.presence_penalty = 0.5f;
           p.frequency_penalty = 0.25f; return p; }(),
      [] { SamplerParams p; p.frequency_penalty = -1.5f; p.top_k = 3; return p; }(),
      [] { SamplerParams p; p.top_p = 1e-6f; return p; }(),
  };
  std::vector<Row> rows;
  for (int32_t i = 0; i < n; ++i) {
    Row r;
    r.params = kinds[i % (sizeof(kinds) / sizeof(kinds[0]))];
    r.params.seed = (uint64_t{rng()} << 32) | rng();
    r.params.sample_index = static_cast<int32_t>(rng() % 4);
    r.logits.resize(vocab);
    const float base = val(rng);
    for (float& x : r.logits) {
      x = val(rng);
      if (style == Style::kCoarse) x = std::round(x * 2.0f) / 2.0f;  // many exact ties
      if (style == Style::kNearTies) {  // clusters a few ulps apart
        x = base + std::round(x) * 0.25f;
        for (uint32_t k = rng() % 4; k > 0; --k) {
          x = std::nextafter(x, std::numeric_limits<float>::infinity());
        }
      }
      if (style == Style::kFlat) x = x / 6.0f;  // large candidate sets
    }
    if (i % 5 == 1) r.logits[tok(rng)] = std::numeric_limits<float>::quiet_NaN();
    if (i % 7 == 2) r.logits[tok(rng)] = -std::numeric_limits<float>::infinity();
    for (int32_t j = 0; j < static_cast<int32_t>(rng() % 20); ++j) r.prompt.push_back(tok(rng));
    for (int32_t j = 0; j < static_cast<int32_t>(rng() % 30); ++j) r.output.push_back(tok(rng));
    rows.push_back(r);
  }
  return rows;
}

TEST(SamplingTest, MatchesCpuSampler) {
  WEFT_SKIP_WITHOUT_CUDA();
  for (int32_t vocab : {1000, 49152}) {
    const std::vector<Row> rows = MakeRows(vocab, 52, 7 + vocab, Style::kNormal);
    EXPECT_EQ(GpuTokens(rows, vocab), CpuTokens(rows, vocab)) << "vocab " << vocab;
  }
}

TEST(SamplingTest, TiesBreakToTheLowerId) {
  WEFT_SKIP_WITHOUT_CUDA();
  const std::vector<Row> rows = MakeRows(3000, 52, 11, Style::kCoarse);
  EXPECT_EQ(GpuTokens(rows, 3000), CpuTokens(rows, 3000));
}

TEST(SamplingTest, NearTiesAndFlatDistributions) {
  WEFT_SKIP_WITHOUT_CUDA();
  for (int32_t vocab : {3000, 49152}) {
    const std::vector<Row> near = MakeRows(vocab, 130, 13 + vocab, Style::kNearTies);
    EXPECT_EQ(GpuTokens(near, vocab), CpuTokens(near, vocab)) << "vocab " << vocab;
    const std::vector<Row> flat = MakeRows(vocab, 130, 17 + vocab, Style::kFlat);
    EXPECT_EQ(GpuTokens(flat, vocab), CpuTokens(flat, vocab)) << "vocab " << vocab;
  }
}

TEST(SamplingTest, ManySeedsAtTheDefaultVocabulary) {
  WEFT_SKIP_WITHOUT_CUDA();
  // 520 rows in one launch (more blocks than SMs): every parameter kind 40 times.
  const std::vector<Row> rows = MakeRows(49152, 520, 101, Style::kNormal);
  EXPECT_EQ(GpuTokens(rows, 49152), CpuTokens(rows, 49152));
}

TEST(SamplingTest, SeedsAndCountersSelectTheDraw) {
  WEFT_SKIP_WITHOUT_CUDA();
  // One request's samples and steps: only the Philox counter changes.
  std::vector<Row> rows = MakeRows(500, 1, 3, Style::kNormal);
  rows[0].params = SamplerParams();
  rows[0].params.seed = 42;
  std::vector<Row> many;
  for (int32_t j = 0; j < 4; ++j) {
    for (int32_t i = 0; i < 8; ++i) {
      Row r = rows[0];
      r.params.sample_index = j;
      r.output.assign(i, 1);
      many.push_back(r);
    }
  }
  EXPECT_EQ(GpuTokens(many, 500), CpuTokens(many, 500));
}

TEST(SamplingTest, NoFiniteLogitGivesMinusOne) {
  WEFT_SKIP_WITHOUT_CUDA();
  Row r;
  r.logits.assign(100, -std::numeric_limits<float>::infinity());
  r.logits[3] = std::numeric_limits<float>::quiet_NaN();
  Row g = r;
  g.params.temperature = 0;
  EXPECT_EQ(GpuTokens({r, g}, 100), (std::vector<int32_t>{-1, -1}));
}

// Logprobs on the device (the default model's vocabulary): the top-N ids equal the host
// Sampler's, the values agree to the double sum's rounding.
TEST(SamplingTest, LogprobsMatchCpuSampler) {
  WEFT_SKIP_WITHOUT_CUDA();
  const int32_t vocab = 49152, max_top = 5;
  std::vector<Row> rows = MakeRows(vocab, 6, 17, Style::kCoarse);
  const int32_t n = static_cast<int32_t>(rows.size());
  std::vector<float> logits;
  std::vector<int32_t> logits_rows, token_index, tokens, num_top;
  std::vector<SampleResult> want(n);
  Sampler sampler(vocab);
  for (int32_t i = 0; i < n; ++i) {
    rows[i].params.num_logprobs = i % (max_top + 1);
    ASSERT_TRUE(sampler.Sample(rows[i].params, rows[i].logits, rows[i].prompt,
                               rows[i].output, &want[i]).ok());
    logits.insert(logits.end(), rows[i].logits.begin(), rows[i].logits.end());
    logits_rows.push_back(i);
    token_index.push_back(i);
    tokens.push_back(want[i].token);
    num_top.push_back(rows[i].params.num_logprobs);
  }
  DeviceArray<float> dlogits(logits), lp(n), top_lp(int64_t{n} * max_top);
  DeviceArray<int32_t> drows(logits_rows), dindex(token_index), dtokens(tokens),
      dtop(num_top), top_ids(int64_t{n} * max_top);
  LogprobArgs a;
  a.logits = dlogits.get();
  a.logits_stride = vocab;
  a.vocab = vocab;
  a.num_rows = n;
  a.max_top = max_top;
  a.logits_rows = drows.get();
  a.tokens = dtokens.get();
  a.token_index = dindex.get();
  a.num_top = dtop.get();
  a.logprob = lp.get();
  a.top_ids = top_ids.get();
  a.top_logprobs = top_lp.get();
  WEFT_EXPECT_CUDA_OK(TokenLogprobs(a, nullptr));
  const std::vector<float> got_lp = lp.ToHost(), got_top_lp = top_lp.ToHost();
  const std::vector<int32_t> got_ids = top_ids.ToHost();
  for (int32_t i = 0; i < n; ++i) {
    EXPECT_NEAR(got_lp[i], want[i].logprob, 1e-5f * (1 + std::abs(want[i].logprob))) << i;
    for (int32_t k = 0; k < num_top[i]; ++k) {
      EXPECT_EQ(got_ids[i * max_top + k], want[i].top_logprobs[k].token) << i << "/" << k;
      EXPECT_NEAR(got_top_lp[i * max_top + k], want[i].top_logprobs[k].logprob,
                  1e-5f * (1 + std::abs(want[i].top_logprobs[k].logprob)));
    }
  }
}

}  // namespace
}  // namespace weft::kernels::cuda

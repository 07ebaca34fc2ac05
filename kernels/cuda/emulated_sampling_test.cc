// The CUDA sampling kernels' own source (sampling.cu: count-row updates, the 512-thread
// per-row kernel with its radix descents over private shared-memory bins, logprobs) run on
// the CPU by the host emulation (testing/host_emulation.h), against the host Sampler
// (common/sampling/sampler.h): the tokens must be equal, every row, and each count row must
// hold its history plus the token sampled — the GPU test sampling_test's claim, checked
// here without a GPU.
#define WEFT_CUDA_HOST_EMULATION 1
#include "kernels/cuda/testing/host_emulation.h"
// The kernels under test, textually (the launch code is compiled out).
#include "kernels/cuda/sampling.cu"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "common/sampling/sampler.h"

namespace weft::kernels::cuda {
namespace {

struct Row {
  std::vector<float> logits;
  std::vector<int32_t> prompt, output;
  SamplerParams params;
  std::string mask;  // structured output's token mask, or empty
};

// The backend's sampling scratch and count rows, kept for its life: grown when a call
// needs more (the new memory garbage), never shrunk or cleared; count rows are zeroed by
// UpdateCounts when a sequence takes one.
struct Scratch {
  std::vector<float> work;
  std::vector<int32_t> counts;
  void Reserve(size_t n) {
    if (work.size() < n) work.resize(n, std::numeric_limits<float>::quiet_NaN());
    if (counts.size() < n) counts.resize(n, 0x5a5a5a5a);
  }
};

// The count row of a history: kCountSeen on every token, plus output occurrences.
std::vector<int32_t> ExpectedCounts(const std::vector<int32_t>& prompt,
                                    const std::vector<int32_t>& output, int32_t vocab) {
  std::vector<int32_t> c(vocab, 0);
  for (int32_t t : prompt) c[t] |= kCountSeen;
  for (int32_t t : output) c[t] = ((c[t] & (kCountSeen - 1)) + 1) | kCountSeen;
  return c;
}

// Runs UpdateCounts' kernels: rows `zero` zeroed, then the marks.
void EmulatedUpdateCounts(Scratch* scratch, int32_t vocab, const std::vector<int32_t>& zero,
                          const std::vector<int32_t>& marks) {
  CountUpdate u;
  u.counts = scratch->counts.data();
  u.vocab = vocab;
  u.zero_rows = zero.data();
  u.num_zero = static_cast<int32_t>(zero.size());
  u.marks = marks.data();
  u.num_marks = static_cast<int32_t>(marks.size() / 3);
  if (u.num_zero > 0) {
    EmulateLaunch(dim3(8, u.num_zero), dim3(kCountThreads), 0, [&] { ZeroCountRowsKernel(u); });
  }
  if (u.num_marks > 0) {
    EmulateLaunch(dim3((u.num_marks + kCountThreads - 1) / kCountThreads), dim3(kCountThreads),
                  0, [&] { MarkCountsKernel(u); });
  }
}

// Samples `rows` on `scratch` (a fresh one when null): row i's count row is i, built from
// its history by UpdateCounts first; afterwards every row's count row must hold its
// history plus the token sampled.
std::vector<int32_t> EmulatedTokens(const std::vector<Row>& rows, int32_t vocab,
                                    Scratch* scratch = nullptr) {
  Scratch fresh;
  if (scratch == nullptr) scratch = &fresh;
  const int32_t n = static_cast<int32_t>(rows.size());
  scratch->Reserve(static_cast<size_t>(n) * vocab);
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
  EmulatedUpdateCounts(scratch, vocab, zero, marks);
  std::string masks;
  std::vector<int32_t> mask_index;
  for (const Row& r : rows) {
    mask_index.push_back(r.mask.empty() ? -1 : static_cast<int32_t>(masks.size() / sampling::MaskBytes(vocab)));
    masks += r.mask;
  }
  std::vector<int32_t> tokens(n, -7);
  SampleArgs a;
  a.logits = logits.data();
  a.logits_stride = vocab;
  a.num_rows = n;
  a.vocab = vocab;
  a.params = params.data();
  a.work = scratch->work.data();
  a.counts = scratch->counts.data();
  a.count_rows = count_rows.data();
  a.tokens = tokens.data();
  if (!masks.empty()) {
    a.masks = reinterpret_cast<const uint8_t*>(masks.data());
    a.mask_index = mask_index.data();
  }
  EmulateLaunch(dim3(n), dim3(kThreads), kBinBytes, [&] { SampleKernel(a); });
  for (int32_t i = 0; i < n; ++i) {
    std::vector<int32_t> output = rows[i].output;
    if (tokens[i] >= 0) output.push_back(tokens[i]);
    const std::vector<int32_t> want = ExpectedCounts(rows[i].prompt, output, vocab);
    const std::vector<int32_t> got(scratch->counts.begin() + int64_t{i} * vocab,
                                   scratch->counts.begin() + int64_t{i + 1} * vocab);
    EXPECT_EQ(got, want) << "count row " << i << " after sampling";
  }
  return tokens;
}

std::vector<int32_t> HostTokens(const std::vector<Row>& rows, int32_t vocab) {
  Sampler sampler(vocab);
  std::vector<int32_t> out;
  for (const Row& r : rows) {
    SampleResult res;
    const absl::Status s = sampler.Sample(r.params, r.logits, r.prompt, r.output, &res, r.mask);
    out.push_back(s.ok() ? res.token : -1);
  }
  return out;
}

// Row i gets parameter kind (first_kind + i) % 9 (7 and 8: penalties).
std::vector<Row> MakeRows(int32_t vocab, int32_t n, uint32_t seed, bool ties,
                          int32_t first_kind = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> val(0.0f, 3.0f);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  std::vector<SamplerParams> kinds(9);
  kinds[0].temperature = 0;
  kinds[2].temperature = 0.8f, kinds[2].top_k = 5;
  kinds[3].top_p = 0.5f;
  kinds[4].temperature = 0.9f, kinds[4].top_p = 0.95f;
  kinds[5].min_p = 0.05f;
  kinds[6].top_k = 40, kinds[6].top_p = 0.9f, kinds[6].min_p = 0.02f;
  kinds[7].repetition_penalty = 0.8f, kinds[7].presence_penalty = 0.5f,
  kinds[7].frequency_penalty = 0.25f;
  kinds[8].repetition_penalty = 1.3f, kinds[8].temperature = 0;
  std::vector<Row> rows;
  for (int32_t i = 0; i < n; ++i) {
    Row r;
    r.params = kinds[(first_kind + i) % kinds.size()];
    r.params.seed = (uint64_t{rng()} << 32) | rng();
    r.params.sample_index = static_cast<int32_t>(rng() % 4);
    r.logits.resize(vocab);
    for (float& x : r.logits) x = ties ? std::round(val(rng)) : val(rng) / 2.0f;
    if (i % 5 == 1) r.logits[tok(rng)] = std::numeric_limits<float>::quiet_NaN();
    if (i % 7 == 2) r.logits[tok(rng)] = -std::numeric_limits<float>::infinity();
    for (int32_t j = 0; j < static_cast<int32_t>(rng() % 12); ++j) r.prompt.push_back(tok(rng));
    for (int32_t j = 0; j < static_cast<int32_t>(rng() % 12); ++j) r.output.push_back(tok(rng));
    rows.push_back(std::move(r));
  }
  return rows;
}

TEST(EmulatedSamplingTest, MatchesHostSampler) {
  for (int32_t vocab : {97, 1500}) {
    const std::vector<Row> rows = MakeRows(vocab, 18, 5 + vocab, false);
    EXPECT_EQ(EmulatedTokens(rows, vocab), HostTokens(rows, vocab)) << "vocab " << vocab;
  }
}

// Structured output's token masks (every other row, from one allowed token to most of
// them), then the same scratch without masks: equal to the host Sampler each time.
TEST(EmulatedSamplingTest, TokenMasksMatchHostSampler) {
  const int32_t vocab = 300;
  std::vector<Row> rows = MakeRows(vocab, 18, 77, false);
  std::mt19937 rng(3);
  for (size_t i = 0; i < rows.size(); i += 2) {
    std::string mask(sampling::MaskBytes(vocab), '\0');
    const uint32_t keep_one_in = 1 + i % 7;  // row 0: all; others sparser
    for (int32_t t = 0; t < vocab; ++t) {
      if (rng() % keep_one_in == 0 || t == static_cast<int32_t>(i)) {
        mask[t / 8] = static_cast<char>(mask[t / 8] | (1 << (t % 8)));
      }
    }
    rows[i].mask = mask;
  }
  Scratch scratch;
  EXPECT_EQ(EmulatedTokens(rows, vocab, &scratch), HostTokens(rows, vocab));
  for (Row& r : rows) r.mask.clear();
  EXPECT_EQ(EmulatedTokens(rows, vocab, &scratch), HostTokens(rows, vocab));
}

TEST(EmulatedSamplingTest, TiesBreakToTheLowerId) {
  const std::vector<Row> rows = MakeRows(700, 18, 9, true);
  EXPECT_EQ(EmulatedTokens(rows, 700), HostTokens(rows, 700));
}

TEST(EmulatedSamplingTest, NoFiniteLogitGivesMinusOne) {
  Row r;
  r.logits.assign(100, -std::numeric_limits<float>::infinity());
  r.logits[3] = std::numeric_limits<float>::quiet_NaN();
  Row g = r;
  g.params.temperature = 0;
  EXPECT_EQ(EmulatedTokens({r, g}, 100), (std::vector<int32_t>{-1, -1}));
}

// One scratch for a sequence of calls whose row counts grow and shrink (every row kind,
// penalties included, cycling through the rows): each call equals the host Sampler, its
// count rows rebuilt over the last call's.
TEST(EmulatedSamplingTest, ScratchReusedAcrossBatchSizes) {
  const int32_t vocab = 200;
  Scratch scratch;
  uint32_t seed = 40;
  for (int32_t n : {10, 2, 12, 1, 9}) {
    ++seed;
    // Kind 7 or 8 first: every call has penalties (and so counts) in its first row.
    const std::vector<Row> rows = MakeRows(vocab, n, seed, (seed & 1) != 0, 7 + seed % 2);
    EXPECT_EQ(EmulatedTokens(rows, vocab, &scratch), HostTokens(rows, vocab)) << n << " rows";
  }
}

// Count rows kept across steps: each step the kernel appends its own sample to the row
// (nothing is re-uploaded), and the tokens equal the host Sampler's given the growing
// output history ("same seed, same tokens") for every parameter kind, penalties included.
TEST(EmulatedSamplingTest, ResidentCountRowsAcrossSteps) {
  const int32_t vocab = 64;  // small: repeats (and so penalties) are frequent
  std::vector<Row> rows = MakeRows(vocab, 9, 123, false);
  Scratch scratch;
  scratch.Reserve(rows.size() * vocab);
  std::vector<int32_t> zero, marks, count_rows;
  for (int32_t i = 0; i < static_cast<int32_t>(rows.size()); ++i) {
    zero.push_back(i);
    count_rows.push_back(i);
    for (int32_t t : rows[i].prompt) marks.insert(marks.end(), {i, t, 0});
    for (int32_t t : rows[i].output) marks.insert(marks.end(), {i, t, 1});
  }
  EmulatedUpdateCounts(&scratch, vocab, zero, marks);
  std::mt19937 rng(8);
  std::normal_distribution<float> val(0.0f, 2.0f);
  for (int step = 0; step < 6; ++step) {
    std::vector<float> logits;
    std::vector<sampling::RowParams> params;
    for (Row& r : rows) {
      for (float& x : r.logits) x = val(rng);
      logits.insert(logits.end(), r.logits.begin(), r.logits.end());
      params.push_back(ToRowParams(r.params, static_cast<int32_t>(r.prompt.size()),
                                   static_cast<int32_t>(r.output.size())));
    }
    const int32_t n = static_cast<int32_t>(rows.size());
    std::vector<int32_t> tokens(n, -7);
    SampleArgs a;
    a.logits = logits.data();
    a.logits_stride = vocab;
    a.num_rows = n;
    a.vocab = vocab;
    a.params = params.data();
    a.work = scratch.work.data();
    a.counts = scratch.counts.data();
    a.count_rows = count_rows.data();
    a.tokens = tokens.data();
    EmulateLaunch(dim3(n), dim3(kThreads), kBinBytes, [&] { SampleKernel(a); });
    ASSERT_EQ(tokens, HostTokens(rows, vocab)) << "step " << step;
    for (int32_t i = 0; i < n; ++i) rows[i].output.push_back(tokens[i]);
  }
  for (int32_t i = 0; i < static_cast<int32_t>(rows.size()); ++i) {
    const std::vector<int32_t> got(scratch.counts.begin() + int64_t{i} * vocab,
                                   scratch.counts.begin() + int64_t{i + 1} * vocab);
    EXPECT_EQ(got, ExpectedCounts(rows[i].prompt, rows[i].output, vocab)) << "row " << i;
  }
}

// Logprobs on the device for `rows` (num_top[i] alternatives of row i, at most max_top):
// the chosen token's and the top N of the raw logits (NaN = -inf, ties to the lower id),
// for rows sampled with any parameters and a token mask: ids equal to the host Sampler's,
// values to its double sum's rounding.
void CheckLogprobs(std::vector<Row> rows, int32_t vocab, int32_t max_top,
                   const std::vector<int32_t>& num_top) {
  std::vector<float> logits;
  std::vector<int32_t> logits_rows, token_index, tokens;
  Sampler sampler(vocab);
  std::vector<SampleResult> want(rows.size());
  for (int32_t i = 0; i < static_cast<int32_t>(rows.size()); ++i) {
    Row& r = rows[i];
    r.params.num_logprobs = num_top[i];
    ASSERT_TRUE(sampler.Sample(r.params, r.logits, r.prompt, r.output, &want[i], r.mask).ok());
    logits.insert(logits.end(), r.logits.begin(), r.logits.end());
    logits_rows.push_back(static_cast<int32_t>(rows.size()) - 1 - i);  // any row order
    token_index.push_back(i);
    tokens.push_back(want[i].token);
  }
  // logits_rows reversed: lay the logits out in that order.
  std::vector<float> laid(logits.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    std::copy(rows[i].logits.begin(), rows[i].logits.end(), laid.begin() + logits_rows[i] * vocab);
  }
  const int32_t n = static_cast<int32_t>(rows.size());
  std::vector<float> logprob(n, 9.0f), top_lp(n * max_top, 9.0f);
  std::vector<int32_t> top_ids(n * max_top, -7);
  LogprobArgs a;
  a.logits = laid.data();
  a.logits_stride = vocab;
  a.vocab = vocab;
  a.num_rows = n;
  a.max_top = max_top;
  a.logits_rows = logits_rows.data();
  a.tokens = tokens.data();
  a.token_index = token_index.data();
  a.num_top = num_top.data();
  a.logprob = logprob.data();
  a.top_ids = top_ids.data();
  a.top_logprobs = top_lp.data();
  EmulateLaunch(dim3(n), dim3(kThreads), 0, [&] { LogprobKernel(a); });
  auto near = [](float got, float want) {
    return std::isinf(want) ? got == want : std::abs(got - want) <= 1e-5f * (1 + std::abs(want));
  };
  for (int32_t i = 0; i < n; ++i) {
    EXPECT_TRUE(near(logprob[i], want[i].logprob)) << i << ": " << logprob[i] << " vs "
                                                   << want[i].logprob;
    ASSERT_EQ(static_cast<int32_t>(want[i].top_logprobs.size()), std::min(num_top[i], vocab));
    for (int32_t k = 0; k < static_cast<int32_t>(want[i].top_logprobs.size()); ++k) {
      EXPECT_EQ(top_ids[i * max_top + k], want[i].top_logprobs[k].token) << i << "/" << k;
      EXPECT_TRUE(near(top_lp[i * max_top + k], want[i].top_logprobs[k].logprob))
          << i << "/" << k << ": " << top_lp[i * max_top + k];
    }
    for (int32_t k = want[i].top_logprobs.size(); k < max_top; ++k) {
      EXPECT_EQ(top_ids[i * max_top + k], -7);
    }
  }
}

TEST(EmulatedSamplingTest, LogprobsMatchHostSampler) {
  const int32_t vocab = 700;
  std::vector<Row> rows = MakeRows(vocab, 9, 31, /*ties=*/true);
  rows[2].mask.assign(sampling::MaskBytes(vocab), '\x0f');  // the mask does not matter
  CheckLogprobs(rows, vocab, /*max_top=*/6, {0, 1, 6, 3, 0, 5, 2, 6, 4});
}

// Many alternatives: the single pass's per-thread lists full (32), rows asking for more
// (the passes after it), many equal logits, and rows whose top N reaches tokens at -inf
// (NaN logits) or the whole vocabulary.
TEST(EmulatedSamplingTest, ManyLogprobsPastThePerThreadListsAndIntoMinusInfinity) {
  const int32_t vocab = 1201;
  std::vector<Row> rows = MakeRows(vocab, 6, 47, /*ties=*/true);
  for (int32_t t = 0; t < vocab; ++t) {  // row 3: 4 finite logits, the rest NaN or -inf
    if (t % 331 != 5) {
      rows[3].logits[t] = t % 2 ? std::numeric_limits<float>::quiet_NaN()
                                : -std::numeric_limits<float>::infinity();
    }
  }
  rows[3].params = SamplerParams{};
  rows[5].logits.assign(vocab, 1.5f);  // every token equal
  rows[5].params = SamplerParams{};
  CheckLogprobs(rows, vocab, /*max_top=*/40, {33, 32, 31, 40, 1, 40});
  std::vector<Row> small = MakeRows(37, 2, 5, /*ties=*/true);  // N = the whole vocabulary
  CheckLogprobs(small, 37, /*max_top=*/40, {37, 36});
}

}  // namespace
}  // namespace weft::kernels::cuda

// The CUDA sampling kernels' own source (sampling.cu: history marks, then the 512-thread
// per-row kernel with its radix descents over private shared-memory bins) run on the CPU
// by the host emulation (testing/host_emulation.h), against the host Sampler
// (common/sampling/sampler.h): the tokens must be equal, every row, and the counts left zero —
// the GPU test sampling_test's claim, checked here without a GPU.
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

// The backend's sampling scratch, kept for its life: grown when a call needs more (the
// counts then zeroed, the work left as garbage), never shrunk or cleared.
struct Scratch {
  std::vector<float> work;
  std::vector<int32_t> counts;
  void Reserve(size_t n) {
    if (work.size() < n) work.assign(n, std::numeric_limits<float>::quiet_NaN());
    if (counts.size() < n) counts.assign(n, 0);
  }
};

// Samples `rows` on `scratch` (a fresh one when null); the whole counts buffer must be
// zero afterwards.
std::vector<int32_t> EmulatedTokens(const std::vector<Row>& rows, int32_t vocab,
                                    Scratch* scratch = nullptr) {
  Scratch fresh;
  if (scratch == nullptr) scratch = &fresh;
  const int32_t n = static_cast<int32_t>(rows.size());
  std::vector<float> logits;
  std::vector<sampling::RowParams> params;
  std::vector<int32_t> history;
  std::vector<int64_t> offsets = {0};
  for (const Row& r : rows) {
    logits.insert(logits.end(), r.logits.begin(), r.logits.end());
    params.push_back(ToRowParams(r.params, static_cast<int32_t>(r.prompt.size()),
                                         static_cast<int32_t>(r.output.size())));
    history.insert(history.end(), r.prompt.begin(), r.prompt.end());
    history.insert(history.end(), r.output.begin(), r.output.end());
    offsets.push_back(static_cast<int64_t>(history.size()));
  }
  history.push_back(0);  // never empty
  std::string masks;
  std::vector<int32_t> mask_index;
  for (const Row& r : rows) {
    mask_index.push_back(r.mask.empty() ? -1 : static_cast<int32_t>(masks.size() / sampling::MaskBytes(vocab)));
    masks += r.mask;
  }
  scratch->Reserve(static_cast<size_t>(n) * vocab);
  std::vector<int32_t> tokens(n, -7);
  SampleArgs a;
  a.logits = logits.data();
  a.logits_stride = vocab;
  a.num_rows = n;
  a.vocab = vocab;
  a.params = params.data();
  a.history = history.data();
  a.history_offsets = offsets.data();
  a.work = scratch->work.data();
  a.counts = scratch->counts.data();
  a.tokens = tokens.data();
  if (!masks.empty()) {
    a.masks = reinterpret_cast<const uint8_t*>(masks.data());
    a.mask_index = mask_index.data();
  }
  EmulateLaunch(dim3(8, n), dim3(kMarkThreads), 0, [&] { MarkHistoryKernel(a); });
  EmulateLaunch(dim3(n), dim3(kThreads), kBinBytes, [&] { SampleKernel(a); });
  const auto dirty = std::count_if(scratch->counts.begin(), scratch->counts.end(),
                                   [](int32_t c) { return c != 0; });
  EXPECT_EQ(dirty, 0) << "counts must be left zero";
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
// penalties included, cycling through the rows): each call equals the host Sampler and
// leaves every count zero for the next.
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

}  // namespace
}  // namespace weft::kernels::cuda

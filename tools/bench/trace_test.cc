// Traces are deterministic (same seed -> same requests, on every machine) and have the
// length distributions BENCHMARKS.md asks for.
#include "tools/bench/trace.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>

#include "tools/bench/rng.h"

namespace weft {
namespace bench {
namespace {

std::vector<TraceRequest> Make(TraceKind kind, int32_t n, uint64_t seed = 1) {
  TraceOptions o;
  o.kind = kind;
  o.num_requests = n;
  o.seed = seed;
  return GenerateTrace(o);
}

double MedianOf(std::vector<int32_t> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

TEST(RngTest, SplitMix64MatchesReference) {
  // Reference values of SplitMix64 from state 0 (Vigna's splitmix64.c).
  uint64_t s = 0;
  EXPECT_EQ(SplitMix64(&s), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(SplitMix64(&s), 0x6E789E6AA1B965F4ULL);
}

TEST(RngTest, UniformIntStaysInRangeAndHitsBothEnds) {
  Rng rng(7);
  int64_t lo = 100, hi = 0;
  for (int i = 0; i < 10000; ++i) {
    const int64_t v = rng.UniformInt(3, 12);
    ASSERT_GE(v, 3);
    ASSERT_LE(v, 12);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_EQ(lo, 3);
  EXPECT_EQ(hi, 12);
}

TEST(TraceTest, SameSeedSameTraceDifferentSeedDifferent) {
  const auto a = Make(TraceKind::kShareGptLike, 50, 42);
  const auto b = Make(TraceKind::kShareGptLike, 50, 42);
  const auto c = Make(TraceKind::kShareGptLike, 50, 43);
  ASSERT_EQ(a.size(), 50u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt, b[i].prompt);
    EXPECT_EQ(a[i].max_tokens, b[i].max_tokens);
  }
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i].prompt == c[i].prompt;
  EXPECT_EQ(same, 0);
}

TEST(TraceTest, RequestIDoesNotDependOnTraceLength) {
  const auto small = Make(TraceKind::kShort, 10);
  const auto big = Make(TraceKind::kShort, 1000);
  for (size_t i = 0; i < small.size(); ++i) {
    EXPECT_EQ(small[i].prompt, big[i].prompt);
    EXPECT_EQ(small[i].max_tokens, big[i].max_tokens);
  }
}

// Pins the generator: if this changes, every recorded trace and result stops being
// replayable. Only update it deliberately (and say so in the commit).
TEST(TraceTest, GoldenSharegptSeed1) {
  const auto t = Make(TraceKind::kShareGptLike, 3, 1);
  std::vector<int32_t> shape = {static_cast<int32_t>(t[0].prompt.size()), t[0].max_tokens,
                                static_cast<int32_t>(t[1].prompt.size()), t[1].max_tokens,
                                static_cast<int32_t>(t[2].prompt.size()), t[2].max_tokens};
  EXPECT_EQ(shape, (std::vector<int32_t>{300, 37, 48, 87, 256, 69}));
  EXPECT_EQ(std::vector<int32_t>(t[0].prompt.begin(), t[0].prompt.begin() + 3),
            (std::vector<int32_t>{9594, 2942, 3827}));
}

TEST(TraceTest, FixedIs128By128) {
  for (const TraceRequest& r : Make(TraceKind::kFixed, 100)) {
    EXPECT_EQ(r.prompt.size(), 128u);
    EXPECT_EQ(r.max_tokens, 128);
  }
}

struct LogNormalCase {
  TraceKind kind;
  double prompt_median, output_median;
  int32_t prompt_lo, prompt_hi, output_lo, output_hi;
};

class LogNormalTraceTest : public ::testing::TestWithParam<LogNormalCase> {};

TEST_P(LogNormalTraceTest, MediansAndClipping) {
  const LogNormalCase& c = GetParam();
  const auto trace = Make(c.kind, 10000, 3);
  std::vector<int32_t> prompt, output;
  int32_t min_id = INT32_MAX, max_id = 0;
  for (const TraceRequest& r : trace) {
    prompt.push_back(static_cast<int32_t>(r.prompt.size()));
    output.push_back(r.max_tokens);
    for (int32_t id : r.prompt) {
      min_id = std::min(min_id, id);
      max_id = std::max(max_id, id);
    }
  }
  EXPECT_NEAR(MedianOf(prompt), c.prompt_median, 0.05 * c.prompt_median);
  EXPECT_NEAR(MedianOf(output), c.output_median, 0.05 * c.output_median);
  EXPECT_GE(*std::min_element(prompt.begin(), prompt.end()), c.prompt_lo);
  EXPECT_LE(*std::max_element(prompt.begin(), prompt.end()), c.prompt_hi);
  EXPECT_GE(*std::min_element(output.begin(), output.end()), c.output_lo);
  EXPECT_LE(*std::max_element(output.begin(), output.end()), c.output_hi);
  EXPECT_GE(min_id, 300);
  EXPECT_LE(max_id, 40000);
  EXPECT_LT(min_id, 400);
  EXPECT_GT(max_id, 39900);
}

INSTANTIATE_TEST_SUITE_P(Kinds, LogNormalTraceTest,
                         ::testing::Values(LogNormalCase{TraceKind::kShareGptLike, 96, 48, 8,
                                                         1024, 4, 512},
                                           LogNormalCase{TraceKind::kShort, 20, 40, 4, 128, 4,
                                                         256}));

TEST(TraceTest, SharegptTailsAreClippedNotDropped) {
  // P(prompt > 1024) ~ 0.4 % and P(output > 512) ~ 0.9 %: the clip values must occur.
  const auto trace = Make(TraceKind::kShareGptLike, 10000, 5);
  int prompt_hi = 0, prompt_lo = 0, output_hi = 0, output_lo = 0;
  for (const TraceRequest& r : trace) {
    prompt_hi += r.prompt.size() == 1024;
    prompt_lo += r.prompt.size() == 8;
    output_hi += r.max_tokens == 512;
    output_lo += r.max_tokens == 4;
  }
  EXPECT_GT(prompt_hi, 10);
  EXPECT_GT(prompt_lo, 5);
  EXPECT_GT(output_hi, 30);
  EXPECT_GT(output_lo, 20);
  EXPECT_LT(prompt_hi, 150);
  EXPECT_LT(output_hi, 250);
}

TEST(TraceTest, LongPromptIsUniform) {
  const auto trace = Make(TraceKind::kLongPrompt, 10000);
  double sum = 0;
  for (const TraceRequest& r : trace) {
    ASSERT_GE(r.prompt.size(), 1024u);
    ASSERT_LE(r.prompt.size(), 2048u);
    ASSERT_GE(r.max_tokens, 16);
    ASSERT_LE(r.max_tokens, 64);
    sum += r.prompt.size();
  }
  EXPECT_NEAR(sum / trace.size(), 1536, 15);
}

TEST(TraceTest, PoissonArrivals) {
  auto trace = Make(TraceKind::kShort, 10000);
  AssignPoissonArrivals(4.0, 9, &trace);
  EXPECT_EQ(trace[0].arrival_s, 0.0);
  for (size_t i = 1; i < trace.size(); ++i) ASSERT_GE(trace[i].arrival_s, trace[i - 1].arrival_s);
  EXPECT_NEAR(trace.back().arrival_s / (trace.size() - 1), 0.25, 0.25 * 0.04);
  auto again = Make(TraceKind::kShort, 10000);
  AssignPoissonArrivals(4.0, 9, &again);
  EXPECT_EQ(again[777].arrival_s, trace[777].arrival_s);
}

TEST(TraceTest, SaltChangesOnlyTheFirstToken) {
  const auto base = Make(TraceKind::kFixed, 20);
  auto a = base, b = base, a2 = base;
  SaltPrompts(1, 300, 40000, &a);
  SaltPrompts(1, 300, 40000, &a2);
  SaltPrompts(2, 300, 40000, &b);
  int differ_from_base = 0, differ_ab = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    EXPECT_EQ(a[i].prompt, a2[i].prompt);
    EXPECT_EQ(a[i].prompt.size(), base[i].prompt.size());
    EXPECT_TRUE(std::equal(a[i].prompt.begin() + 1, a[i].prompt.end(), base[i].prompt.begin() + 1));
    differ_from_base += a[i].prompt[0] != base[i].prompt[0];
    differ_ab += a[i].prompt[0] != b[i].prompt[0];
  }
  EXPECT_GE(differ_from_base, 19);
  EXPECT_GE(differ_ab, 19);
}

TEST(TraceFileTest, RoundTrip) {
  auto trace = Make(TraceKind::kShort, 5);
  trace[1].arrival_s = 0.125;
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/t.jsonl";
  ASSERT_TRUE(WriteTraceFile(path, trace).ok());
  absl::StatusOr<std::vector<TraceRequest>> back = ReadTraceFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ((*back)[i].prompt, trace[i].prompt);
    EXPECT_EQ((*back)[i].max_tokens, trace[i].max_tokens);
  }
  EXPECT_LT((*back)[0].arrival_s, 0);
  EXPECT_EQ((*back)[1].arrival_s, 0.125);
}

TEST(TraceFileTest, BadLinesAreErrorsWithLineNumbers) {
  EXPECT_TRUE(ParseTraceLine(R"({"prompt":[1,2],"max_tokens":3})").ok());
  EXPECT_FALSE(ParseTraceLine(R"({"prompt":[],"max_tokens":3})").ok());
  EXPECT_FALSE(ParseTraceLine(R"({"prompt":[1,-2],"max_tokens":3})").ok());
  EXPECT_FALSE(ParseTraceLine(R"({"prompt":[1],"max_tokens":0})").ok());
  EXPECT_FALSE(ParseTraceLine(R"({"prompt":[1],"max_tokens":2,"arrival_s":-1})").ok());
  EXPECT_FALSE(ParseTraceLine("not json").ok());
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/bad.jsonl";
  std::ofstream(path) << "{\"prompt\":[1],\"max_tokens\":2}\n\n{\"prompt\":\"x\"}\n";
  absl::StatusOr<std::vector<TraceRequest>> r = ReadTraceFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(":3:"), std::string::npos) << r.status();
}

TEST(TraceTest, KindNames) {
  for (const char* n : {"fixed", "sharegpt-like", "short", "long-prompt"}) {
    absl::StatusOr<TraceKind> k = ParseTraceKind(n);
    ASSERT_TRUE(k.ok());
    EXPECT_EQ(TraceKindName(*k), n);
  }
  EXPECT_FALSE(ParseTraceKind("sharegpt").ok());
}

}  // namespace
}  // namespace bench
}  // namespace weft

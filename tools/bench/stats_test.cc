// Percentiles (numpy's linear interpolation) and the per-run summary: TTFT,
// inter-token gaps with multi-token messages, failures kept and counted.
#include "tools/bench/stats.h"

#include <cmath>

#include <gtest/gtest.h>

namespace weft {
namespace bench {
namespace {

constexpr int64_t kMs = 1000000;

TEST(PercentileTest, LinearInterpolationLikeNumpy) {
  const std::vector<double> v = {1, 2, 3, 4};
  // numpy.percentile([1,2,3,4], [0, 50, 99, 100, 25]) -> 1, 2.5, 3.97, 4, 1.75
  EXPECT_DOUBLE_EQ(Percentile(v, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.5), 2.5);
  EXPECT_NEAR(Percentile(v, 0.99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(Percentile(v, 1.0), 4.0);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.25), 1.75);
  EXPECT_DOUBLE_EQ(Percentile(std::vector<double>{7}, 0.99), 7.0);
  EXPECT_TRUE(std::isnan(Percentile(std::vector<double>{}, 0.5)));
}

TEST(PercentileTest, HundredValues) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  // numpy.percentile(range(1, 101), 99) == 99.01
  EXPECT_NEAR(Percentile(v, 0.99), 99.01, 1e-9);
  EXPECT_NEAR(Percentile(v, 0.50), 50.5, 1e-9);
  const Distribution d = Describe(v);
  EXPECT_EQ(d.count, 100);
  EXPECT_DOUBLE_EQ(d.mean, 50.5);
  EXPECT_DOUBLE_EQ(d.max, 100);
  EXPECT_NEAR(d.p90, 90.1, 1e-9);
}

TEST(MedianTest, OddEvenEmpty) {
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_TRUE(std::isnan(Median({})));
}

RequestRecord Ok(int64_t send_ms, std::vector<std::pair<int64_t, int32_t>> msgs,
                 int64_t end_ms, int32_t max_tokens) {
  RequestRecord r;
  r.send_ns = send_ms * kMs;
  r.scheduled_ns = r.send_ns;
  for (auto [t, k] : msgs) r.AddTokens(t * kMs, k);
  r.end_ns = end_ms * kMs;
  r.max_tokens = max_tokens;
  r.prompt_tokens = 10;
  return r;
}

TEST(SummarizeTest, GapsTtftAndMultiTokenMessages) {
  std::vector<RequestRecord> recs;
  // Tokens at 100, 110, 130 ms: TTFT 100 ms, gaps 10 and 20 ms.
  recs.push_back(Ok(0, {{100, 1}, {110, 1}, {130, 1}}, 131, 3));
  // One message of 3 tokens at 50 ms after the send at 20 ms, then 1 token at 90:
  // TTFT 30 ms, gaps 0, 0 (same message), 40 ms.
  recs.push_back(Ok(20, {{50, 3}, {90, 1}}, 100, 4));
  RunSummary s;
  LatencySamples samples;
  Summarize(recs, &s, &samples);
  EXPECT_EQ(s.num_ok, 2);
  EXPECT_EQ(s.num_failed, 0);
  EXPECT_EQ(s.output_tokens, 7);
  EXPECT_EQ(s.prompt_tokens, 20);
  EXPECT_EQ(s.num_short, 0);
  ASSERT_EQ(samples.ttft_s.size(), 2u);
  EXPECT_NEAR(samples.ttft_s[0], 0.030, 1e-12);
  EXPECT_NEAR(samples.ttft_s[1], 0.100, 1e-12);
  const std::vector<double> gaps = {0, 0, 0.010, 0.020, 0.040};
  ASSERT_EQ(samples.itl_s.size(), gaps.size());
  for (size_t i = 0; i < gaps.size(); ++i) EXPECT_NEAR(samples.itl_s[i], gaps[i], 1e-12);
  // Wall: first send 0 to last end 131 ms.
  EXPECT_NEAR(s.wall_s, 0.131, 1e-12);
  EXPECT_NEAR(s.output_tok_s, 7 / 0.131, 1e-9);
  EXPECT_NEAR(s.req_s, 2 / 0.131, 1e-9);
  EXPECT_NEAR(s.total_tok_s, 27 / 0.131, 1e-9);
  EXPECT_NEAR(s.ttft_s.p50, 0.065, 1e-12);
  EXPECT_NEAR(s.e2e_s.max, 0.131, 1e-12);
}

TEST(SummarizeTest, FailuresAreCountedAndShortAndMismatchFlagged) {
  std::vector<RequestRecord> recs;
  recs.push_back(Ok(0, {{10, 1}, {20, 1}}, 20, 2));
  RequestRecord fail = Ok(0, {{10, 1}}, 15, 5);
  fail.status = absl::UnavailableError("no replica");
  recs.push_back(fail);
  recs.push_back(fail);
  RequestRecord short_one = Ok(0, {{10, 1}}, 12, 5);
  short_one.server_output_tokens = 2;  // server says 2, we saw 1
  recs.push_back(short_one);
  RunSummary s;
  LatencySamples samples;
  Summarize(recs, &s, &samples);
  EXPECT_EQ(s.num_requests, 4);
  EXPECT_EQ(s.num_ok, 2);
  EXPECT_EQ(s.num_failed, 2);
  EXPECT_EQ(s.num_short, 1);
  EXPECT_EQ(s.num_count_mismatch, 1);
  EXPECT_EQ(s.output_tokens, 3);  // failed requests' tokens are not throughput
  ASSERT_EQ(s.errors.size(), 1u);
  EXPECT_EQ(s.errors.begin()->first, "UNAVAILABLE: no replica");
  EXPECT_EQ(s.errors.begin()->second, 2);
  EXPECT_EQ(samples.e2e_s.size(), 2u);
}

TEST(SummarizeTest, EmptyRunHasNoRates) {
  RunSummary s;
  LatencySamples samples;
  Summarize({}, &s, &samples);
  EXPECT_EQ(s.num_requests, 0);
  EXPECT_EQ(s.output_tok_s, 0);
  EXPECT_TRUE(std::isnan(s.ttft_s.p50));
}

TEST(SummarizeTest, DispatchLagIsLatestSendBehindSchedule) {
  std::vector<RequestRecord> recs;
  recs.push_back(Ok(5, {{10, 1}}, 10, 1));
  recs[0].scheduled_ns = 2 * kMs;
  RunSummary s;
  LatencySamples samples;
  Summarize(recs, &s, &samples);
  EXPECT_NEAR(s.max_dispatch_lag_s, 0.003, 1e-12);
}

}  // namespace
}  // namespace bench
}  // namespace weft

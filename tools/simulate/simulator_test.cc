#include "tools/simulate/simulator.h"

#include <vector>

#include "gtest/gtest.h"
#include "tools/simulate/cost_model.h"
#include "tools/simulate/trace.h"

namespace weft::sim {
namespace {

TEST(TraceTest, PresetsAreSeededAndClipped) {
  TraceOptions o = *TracePreset("sharegpt");
  o.num_requests = 500;
  std::vector<TraceRequest> a = GenerateTrace(o), b = GenerateTrace(o);
  ASSERT_EQ(a.size(), 500u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt_token_ids, b[i].prompt_token_ids);
    EXPECT_EQ(a[i].output_len, b[i].output_len);
    EXPECT_GE(a[i].output_len, 4);
    EXPECT_LE(a[i].output_len, 512);
    EXPECT_GE(a[i].prompt_token_ids.size(), 8u);
    EXPECT_LE(a[i].prompt_token_ids.size(), 1024u);
    for (int32_t t : a[i].prompt_token_ids) {
      EXPECT_GE(t, 300);
      EXPECT_LT(t, 40000);
    }
  }
  TraceOptions f = *TracePreset("fixed");
  f.num_requests = 3;
  for (const TraceRequest& r : GenerateTrace(f)) {
    EXPECT_EQ(r.output_len, 128);
    EXPECT_EQ(r.prompt_token_ids.size(), 128u);
  }
  EXPECT_FALSE(TracePreset("nope").ok());
}

TEST(CostModelTest, FlatUpToTheKneeThenLinear) {
  CostModel m;
  m.step_ms = 10;
  m.ms_per_token = 1;
  m.ms_per_context_token = 0;
  m.knee_tokens = 100;
  StepPlan p;
  p.set_num_scheduled_tokens(50);
  EXPECT_DOUBLE_EQ(m.StepSeconds(p), 0.010);
  p.set_num_scheduled_tokens(100);
  EXPECT_DOUBLE_EQ(m.StepSeconds(p), 0.010);
  p.set_num_scheduled_tokens(130);
  EXPECT_DOUBLE_EQ(m.StepSeconds(p), 0.040);
  m.ms_per_context_token = 0.5;
  weft::v1::CachedSequence* c = p.add_cached_sequences();
  c->set_num_computed_tokens(9);
  c->set_num_scheduled_tokens(1);
  EXPECT_DOUBLE_EQ(m.StepSeconds(p), 0.045);
}

TEST(SummarizeTest, NearestRank) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  LatencyStats s = Summarize(&v);
  EXPECT_EQ(s.p50_s, 50);
  EXPECT_EQ(s.p99_s, 99);
  EXPECT_DOUBLE_EQ(s.mean_s, 50.5);
}

SimResult RunPolicy(PolicyKind policy, const std::vector<TraceRequest>& trace) {
  SimulatorOptions o;
  o.scheduler.policy = policy;
  o.scheduler.max_waiting = 10000;
  o.scheduler.limits.max_model_len = 1 << 16;
  o.num_blocks = 16384;
  o.concurrency = 64;
  absl::StatusOr<SimResult> r = Simulate(trace, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SimResult();
}

TEST(SimulatorTest, ContinuousBatchingBeatsStaticOnHighVarianceOutputs) {
  TraceOptions t = *TracePreset("sharegpt");
  t.num_requests = 1000;
  const std::vector<TraceRequest> trace = GenerateTrace(t);
  const SimResult cont = RunPolicy(PolicyKind::kDecodeFirst, trace);
  const SimResult stat = RunPolicy(PolicyKind::kStatic, trace);
  int64_t expected_output = 0;
  for (const TraceRequest& r : trace) expected_output += r.output_len;
  EXPECT_EQ(cont.output_tokens, expected_output);
  EXPECT_EQ(stat.output_tokens, expected_output);
  EXPECT_GT(cont.output_tokens_per_s, 4 * stat.output_tokens_per_s);
  EXPECT_EQ(stat.preemptions, 0);
  // Deterministic.
  EXPECT_EQ(RunPolicy(PolicyKind::kDecodeFirst, trace).duration_s, cont.duration_s);
}

TEST(SimulatorTest, OpenLoopFollowsArrivals) {
  TraceOptions t = *TracePreset("lowvar");
  t.num_requests = 50;
  t.arrival_rate = 2;  // sparse: the system idles between arrivals
  const std::vector<TraceRequest> trace = GenerateTrace(t);
  SimulatorOptions o;
  o.concurrency = 0;
  o.num_blocks = 4096;
  absl::StatusOr<SimResult> r = Simulate(trace, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GE(r->duration_s, trace.back().arrival_s);
  EXPECT_LT(r->ttft.p50_s, 0.2);  // little queueing at this rate
}

}  // namespace
}  // namespace weft::sim

#include "scheduler/service/step_tracker.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

weft::v1::StepResult Result(int64_t step, int rank, std::vector<std::pair<int64_t, int32_t>> toks) {
  weft::v1::StepResult r;
  r.set_step_id(step);
  r.set_rank(rank);
  for (auto [s, t] : toks) {
    auto* x = r.add_tokens();
    x->set_seq_id(s);
    x->set_token_id(t);
  }
  r.set_tokens_hash(TokensHash(r));
  if (rank != 0) r.clear_tokens();
  return r;
}

StepDeadlineOptions Opts() {
  StepDeadlineOptions o;
  o.floor = absl::Seconds(1);
  o.k = 4;
  return o;
}

TEST(StepTrackerTest, CompletesWhenAllRanksAgree) {
  StepTracker t(Opts(), 2);
  const absl::Time t0 = absl::UnixEpoch();
  t.OnPlanSent(1, 10, t0);
  EXPECT_TRUE(t.OnResult(Result(1, 1, {{5, 7}}), t0 + absl::Milliseconds(10)).empty());
  auto o = t.OnResult(Result(1, 0, {{5, 7}}), t0 + absl::Milliseconds(100));
  ASSERT_EQ(o.size(), 1u);
  ASSERT_EQ(o[0].outcome, StepTracker::Outcome::kComplete);
  EXPECT_EQ(o[0].result.tokens(0).token_id(), 7);
  EXPECT_NEAR(t.seconds_per_token(), 0.01, 1e-9);
  EXPECT_EQ(t.num_in_flight(), 0);
}

TEST(StepTrackerTest, DisagreementAndErrorsAreReported) {
  StepTracker t(Opts(), 2);
  const absl::Time t0 = absl::UnixEpoch();
  t.OnPlanSent(1, 1, t0);
  t.OnResult(Result(1, 0, {{5, 7}}), t0);
  EXPECT_EQ(t.OnResult(Result(1, 1, {{5, 8}}), t0)[0].outcome, StepTracker::Outcome::kDisagree);
  t.OnPlanSent(2, 1, t0);
  auto bad = Result(2, 0, {});
  bad.set_error("boom");
  t.OnResult(std::move(bad), t0);
  auto o = t.OnResult(Result(2, 1, {}), t0);
  ASSERT_EQ(o.size(), 1u);
  EXPECT_EQ(o[0].outcome, StepTracker::Outcome::kError);
  EXPECT_NE(o[0].message.find("boom"), std::string::npos);
  EXPECT_EQ(t.OnResult(Result(9, 0, {}), t0)[0].outcome, StepTracker::Outcome::kUnexpected);
}

TEST(StepTrackerTest, TwoMissedDeadlinesFenceAndDeadlineAdapts) {
  StepTracker t(Opts(), 1);
  const absl::Time t0 = absl::UnixEpoch();
  t.OnPlanSent(1, 100, t0);
  EXPECT_EQ(t.DeadlineFor(100), absl::Seconds(1));  // no history: the floor
  EXPECT_FALSE(t.CheckDeadline(t0 + absl::Milliseconds(999)));
  EXPECT_FALSE(t.CheckDeadline(t0 + absl::Milliseconds(1001)));
  EXPECT_EQ(t.misses(), 1);
  EXPECT_TRUE(t.CheckDeadline(t0 + absl::Milliseconds(2001)));
  // A late result resets; the deadline now follows the measured rate.
  StepTracker u(Opts(), 1);
  u.OnPlanSent(1, 100, t0);
  u.OnResult(Result(1, 0, {}), t0 + absl::Seconds(2));  // 20 ms per token
  EXPECT_EQ(u.misses(), 0);
  EXPECT_EQ(u.DeadlineFor(100), absl::Seconds(8));     // 4 x 0.02 x 100
  EXPECT_EQ(u.DeadlineFor(1), absl::Seconds(1));       // floor
}

TEST(StepTrackerTest, PipelinedStepsCompleteInOrder) {
  StepTracker t(Opts(), 1);
  const absl::Time t0 = absl::UnixEpoch();
  t.OnPlanSent(1, 1, t0);
  t.OnPlanSent(2, 1, t0);
  EXPECT_EQ(t.num_in_flight(), 2);
  // Step 2's answer first: held until step 1 completes, then both come out in order.
  EXPECT_TRUE(t.OnResult(Result(2, 0, {{1, 4}}), t0).empty());
  auto o = t.OnResult(Result(1, 0, {{1, 3}}), t0);
  ASSERT_EQ(o.size(), 2u);
  EXPECT_EQ(o[0].result.step_id(), 1);
  EXPECT_EQ(o[1].result.step_id(), 2);
  EXPECT_EQ(t.OnResult(Result(2, 0, {}), t0)[0].outcome, StepTracker::Outcome::kUnexpected);
}

}  // namespace
}  // namespace weft

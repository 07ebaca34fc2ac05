// Scale-down and scale-up in the scheduler core: a draining replica takes no new
// sequence and finishes its running ones; its queue moves to the other replicas; a
// drain that times out re-queues the rest with their tokens; a replica added under load
// takes its share of the waiting queue at its first step. Every finished sequence is
// checked against the fake model's reference (a lost or repeated token fails it).
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler.h"
#include "scheduler/testing/harness.h"

namespace weft {
namespace {

using ::testing::HasSubstr;

SchedulerOptions Opts(int32_t max_num_seqs = 16) {
  SchedulerOptions o;
  o.policy = PolicyKind::kDecodeFirst;
  o.block_size = 4;
  o.max_num_batched_tokens = 64;
  o.max_num_seqs = max_num_seqs;
  o.limits.max_model_len = 4096;
  o.admission_watermark = 0;
  return o;
}

ReplicaMetrics MetricsOf(TestHarness& h, ReplicaId id) {
  for (const ReplicaMetrics& r : h.scheduler().Metrics().replicas) {
    if (r.replica == id) return r;
  }
  ADD_FAILURE() << "no replica " << id.value();
  return ReplicaMetrics{};
}

// Steps replica `index` until the core has no unfinished request placed on it (or the
// step cap), applying each step's results at once.
void StepUntilIdle(TestHarness& h, int index, int max_steps = 200) {
  const ReplicaId id = h.replica(index);
  for (int i = 0; i < max_steps; ++i) {
    const ReplicaMetrics m = MetricsOf(h, id);
    if (m.num_running == 0 && m.num_waiting == 0) return;
    h.Step(index);
  }
  ADD_FAILURE() << "replica " << id.value() << " still busy after " << max_steps << " steps";
}

TEST(SchedulerDrainTest, DrainingReplicaFinishesItsSequencesAndTakesNoNewOnes) {
  TestHarness h(Opts(), {64, 64});
  const ReplicaId r1 = h.replica(0), r2 = h.replica(1);
  h.AddSimple(8, 6);
  h.AddSimple(8, 6, 0, 1, /*first_token=*/100);
  EXPECT_EQ(h.Step(0), "*1:8");
  EXPECT_EQ(h.Step(1), "*2:8");
  ASSERT_TRUE(h.scheduler().DrainReplica(r1).ok());
  ASSERT_TRUE(h.scheduler().DrainReplica(r1).ok());  // idempotent
  EXPECT_EQ(h.scheduler().Metrics().num_draining_replicas, 1);
  EXPECT_FALSE(h.scheduler().ReplicaDrained(r1));
  // A new request goes to r2 although r1 has as many free blocks.
  h.AddSimple(8, 6, 0, 1, 200);
  EXPECT_EQ(h.Step(1), "*3:8 2:1");
  EXPECT_EQ(h.Step(0), "1:1");
  StepUntilIdle(h, 0);
  EXPECT_TRUE(h.scheduler().ReplicaDrained(r1));
  EXPECT_FALSE(h.scheduler().ReplicaDrained(r2)) << "r2 does not drain";
  ASSERT_TRUE(h.RemoveReplica(r1).ok());
  StepUntilIdle(h, 0);  // r2 is index 0 now
  ASSERT_TRUE(h.Collect().ok());
  EXPECT_EQ(h.scheduler().num_unfinished_requests(), 0);
  EXPECT_EQ(h.scheduler().counters().retries_total, 0) << "a finished drain re-queues nothing";
  EXPECT_TRUE(h.VerifyFinished().ok()) << h.VerifyFinished();
  EXPECT_TRUE(h.VerifyAllFinishedOnce().ok()) << h.VerifyAllFinishedOnce();
  EXPECT_TRUE(h.scheduler().CheckInvariants().ok()) << h.scheduler().CheckInvariants();
}

TEST(SchedulerDrainTest, TheDrainingReplicasQueueMovesToTheOthers) {
  TestHarness h(Opts(/*max_num_seqs=*/1), {64, 64});
  const ReplicaId r1 = h.replica(0), r2 = h.replica(1);
  for (int i = 0; i < 4; ++i) h.AddSimple(8, 5, 0, 1, 10 + 20 * i);
  EXPECT_EQ(h.Step(0), "*1:8");
  EXPECT_EQ(h.Step(1), "*2:8");
  ASSERT_EQ(MetricsOf(h, r1).num_waiting, 1);
  ASSERT_EQ(MetricsOf(h, r2).num_waiting, 1);
  ASSERT_TRUE(h.scheduler().DrainReplica(r1).ok());
  EXPECT_EQ(MetricsOf(h, r1).num_waiting, 0);
  EXPECT_EQ(MetricsOf(h, r2).num_waiting, 2);
  EXPECT_TRUE(h.scheduler().CheckInvariants().ok()) << h.scheduler().CheckInvariants();
  StepUntilIdle(h, 0);
  ASSERT_TRUE(h.scheduler().ReplicaDrained(r1));
  ASSERT_TRUE(h.RemoveReplica(r1).ok());
  StepUntilIdle(h, 0);
  ASSERT_TRUE(h.Collect().ok());
  EXPECT_EQ(h.scheduler().counters().retries_total, 0);
  EXPECT_TRUE(h.VerifyAllFinishedOnce().ok()) << h.VerifyAllFinishedOnce();
  EXPECT_TRUE(h.VerifyFinished().ok()) << h.VerifyFinished();
}

TEST(SchedulerDrainTest, PreemptedSequencesOfADrainingReplicaMoveOn) {
  // r1 holds 6 blocks: three 8-token prompts fill it, and their first decode needs a
  // third block each, so r1 preempts while it drains; the victim resumes on r2.
  TestHarness h(Opts(), {6});
  const ReplicaId r1 = h.replica(0);
  for (int i = 0; i < 3; ++i) h.AddSimple(8, 12, 0, 1, 10 + 20 * i);
  EXPECT_EQ(h.Step(0), "*1:8 *2:8 *3:8");
  const ReplicaId r2 = h.AddReplica(64);
  ASSERT_TRUE(h.scheduler().DrainReplica(r1).ok());
  EXPECT_EQ(h.Step(0), "1:1 2:1 -3");
  EXPECT_EQ(MetricsOf(h, r1).num_waiting, 0);
  EXPECT_EQ(MetricsOf(h, r2).num_waiting, 1);
  EXPECT_EQ(h.Step(1), "*3:9") << "prompt + its first token, recomputed on r2";
  StepUntilIdle(h, 0);
  ASSERT_TRUE(h.scheduler().ReplicaDrained(r1));
  ASSERT_TRUE(h.RemoveReplica(r1).ok());
  StepUntilIdle(h, 0);
  ASSERT_TRUE(h.Collect().ok());
  EXPECT_EQ(h.scheduler().counters().retries_total, 0);
  // r1 preempts again as 1 and 2 grow; every victim resumed on r2 (checked by r1
  // draining empty while admitting nothing).
  EXPECT_GE(h.scheduler().counters().preemptions_total, 1);
  EXPECT_TRUE(h.VerifyAllFinishedOnce().ok()) << h.VerifyAllFinishedOnce();
  EXPECT_TRUE(h.VerifyFinished().ok()) << h.VerifyFinished();
}

TEST(SchedulerDrainTest, WhenEveryReplicaDrainsNewWorkWaitsForANewReplica) {
  TestHarness h(Opts(), {64});
  const ReplicaId r1 = h.replica(0);
  h.AddSimple(8, 4);
  EXPECT_EQ(h.Step(0), "*1:8");
  ASSERT_TRUE(h.scheduler().DrainReplica(r1).ok());
  auto waiting = h.Add([] {
    RequestSpec s;
    s.prompt_token_ids = {30, 31, 32, 33, 34, 35, 36, 37};
    s.stopping.max_tokens = 4;
    s.stopping.ignore_eos = true;
    return s;
  }());
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  EXPECT_EQ(h.Step(0), "1:1") << "a draining replica admits nothing";
  for (int i = 0; i < 10 && MetricsOf(h, r1).num_running > 0; ++i) h.Step(0);
  EXPECT_EQ(MetricsOf(h, r1).num_running, 0);
  EXPECT_EQ(MetricsOf(h, r1).num_waiting, 1);
  EXPECT_FALSE(h.scheduler().ReplicaDrained(r1)) << "it still holds a waiting sequence";
  const ReplicaId r2 = h.AddReplica(64);
  EXPECT_EQ(MetricsOf(h, r1).num_waiting, 0);
  EXPECT_TRUE(h.scheduler().ReplicaDrained(r1));
  EXPECT_EQ(h.Step(1), "*2:8");
  ASSERT_TRUE(h.RemoveReplica(r1).ok());
  StepUntilIdle(h, 0);
  ASSERT_TRUE(h.Collect().ok());
  EXPECT_EQ(h.scheduler().counters().retries_total, 0);
  EXPECT_TRUE(h.VerifyAllFinishedOnce().ok()) << h.VerifyAllFinishedOnce();
  EXPECT_TRUE(h.VerifyFinished().ok()) << h.VerifyFinished();
  (void)r2;
}

TEST(SchedulerDrainTest, ADrainThatTimesOutRequeuesTheRestWithTheirTokens) {
  TestHarness h(Opts(), {64, 64});
  const ReplicaId r1 = h.replica(0);
  h.AddSimple(8, 6);
  EXPECT_EQ(h.Step(0), "*1:8");
  EXPECT_EQ(h.Step(0), "1:1");  // 2 tokens so far
  ASSERT_TRUE(h.scheduler().DrainReplica(r1).ok());
  ASSERT_TRUE(h.RemoveReplica(r1).ok());  // the drain timeout
  EXPECT_EQ(h.scheduler().counters().retries_total, 1);
  EXPECT_EQ(h.Step(0), "*1:10") << "recomputes prompt + the 2 tokens it has";
  EXPECT_TRUE(h.last_plan().new_sequences(0).resumed());
  StepUntilIdle(h, 0);
  ASSERT_TRUE(h.Collect().ok());
  EXPECT_EQ(h.output(RequestId(1)).tokens.size(), 6u);
  EXPECT_EQ(h.output(RequestId(1)).usage.num_retries, 1);
  EXPECT_TRUE(h.VerifyFinished().ok()) << h.VerifyFinished();
}

TEST(SchedulerScaleUpTest, AnAddedReplicaTakesItsShareOfTheQueueAtItsFirstStep) {
  // One replica running 2 sequences at a time with 6 queued, all sharing a cached
  // prompt prefix: the replica added under load still gets queued work at once.
  TestHarness h(Opts(/*max_num_seqs=*/2), {64});
  for (int i = 0; i < 8; ++i) h.AddSimple(9, 30);  // identical prompts
  EXPECT_EQ(h.Step(0), "*1:9 *2:9");
  EXPECT_EQ(h.Step(0), "1:1 2:1");
  ASSERT_EQ(MetricsOf(h, h.replica(0)).num_waiting, 6);
  const ReplicaId r2 = h.AddReplica(64);
  const int32_t moved = MetricsOf(h, r2).num_waiting;
  EXPECT_GE(moved, 3) << "the new replica has the most free blocks";
  EXPECT_LT(moved, 6) << "the old one keeps a share (its prefix hit counts)";
  EXPECT_THAT(h.Step(1), HasSubstr("*")) << "new sequences at the new replica's first step";
  EXPECT_EQ(MetricsOf(h, r2).num_running, 2);
  for (int i = 0; i < 400 && h.scheduler().num_unfinished_requests() > 0; ++i) {
    h.Step(0);
    h.Step(1);
  }
  ASSERT_TRUE(h.Collect().ok());
  EXPECT_EQ(h.scheduler().num_unfinished_requests(), 0);
  EXPECT_TRUE(h.VerifyAllFinishedOnce().ok()) << h.VerifyAllFinishedOnce();
  EXPECT_TRUE(h.VerifyFinished().ok()) << h.VerifyFinished();
  EXPECT_TRUE(h.scheduler().CheckInvariants().ok()) << h.scheduler().CheckInvariants();
}

}  // namespace
}  // namespace weft

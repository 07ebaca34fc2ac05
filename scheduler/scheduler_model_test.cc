// Randomized planner test (≥ 100,000 seeded operations per main configuration): random
// arrivals (shared prefixes, n > 1, priorities, stop tokens/strings, deadlines),
// cancellations, clock jumps, replica removal and re-attachment, replica drains
// (scale-down: released once drained, or removed early as by a drain timeout) with a
// replica added under load (scale-up), and pipelined steps executed by FakeWorkers.
// After every operation:
//   * Scheduler::CheckInvariants (block ownership = ref counts, pool accounting, queue
//     and counter consistency, no waste beyond the last partial block);
//   * every sequence that finished is checked against the reference model
//     (FakeModel::Reference: the same request run alone, no scheduler) — exact tokens,
//     finish reason and text for normal finishes, a token prefix for aborts;
//   * the FakeWorkers reject any protocol violation (unknown ids, stale cached KV,
//     step gaps, sampling before the end) and their KV contents feed the tokens, so a
//     wrong block, copy or prefix hit shows up as a token mismatch.
// At the end everything drains: each sequence finished exactly once, no block is
// referenced.
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler.h"
#include "scheduler/testing/harness.h"

namespace weft {
namespace {

using ::weft::testing::StatusIs;

struct ModelConfig {
  PolicyKind policy;
  int32_t steps_in_flight;
  int32_t num_ops;
  uint64_t seed;
};

std::string ConfigName(const ::testing::TestParamInfo<ModelConfig>& info) {
  std::string name(PolicyKindName(info.param.policy));
  for (char& c : name) c = c == '-' ? '_' : c;
  return absl::StrCat(name, "_inflight", info.param.steps_in_flight);
}

class PlannerModelTest : public ::testing::TestWithParam<ModelConfig> {
 protected:
  PlannerModelTest() : rng_(GetParam().seed) {}

  SchedulerOptions Options() const {
    SchedulerOptions o;
    o.policy = GetParam().policy;
    o.block_size = 4;
    o.max_num_batched_tokens = 24;
    o.max_num_seqs = 8;
    o.limits.max_model_len = 128;
    o.admission_watermark = 0.05;
    o.max_preemptions_per_sequence = 3;
    o.max_steps_in_flight = GetParam().steps_in_flight;
    o.max_waiting = 48;
    o.max_retries = 2;
    o.limits.max_n = 3;
    return o;
  }

  int32_t Uniform(int32_t lo, int32_t hi) {  // [lo, hi]
    return lo + static_cast<int32_t>(rng_() % static_cast<uint64_t>(hi - lo + 1));
  }

  RequestSpec RandomSpec(absl::Time now) {
    RequestSpec spec;
    const int32_t family = Uniform(0, 3);  // requests of a family share 8 tokens
    const int32_t len = Uniform(1, 30);
    for (int32_t i = 0; i < len; ++i) {
      spec.prompt_token_ids.push_back(i < 8 ? 1 + family * 8 + i : Uniform(1, 63));
    }
    spec.stopping.max_tokens = Uniform(1, 20);
    spec.stopping.ignore_eos = Uniform(0, 1) == 0;
    if (Uniform(0, 4) == 0) spec.stopping.stop_token_ids = {Uniform(1, 63)};
    if (Uniform(0, 5) == 0) spec.stopping.stop_strings = {"ab", "\xC3\xA9"};
    spec.n = Uniform(0, 4) == 0 ? Uniform(2, 3) : 1;
    spec.priority = Uniform(0, 2);
    if (Uniform(0, 9) == 0) spec.deadline = now + absl::Milliseconds(Uniform(1, 60));
    if (Uniform(0, 3) != 0) spec.sampling.seed = rng_();
    return spec;
  }

  // One step action on a random replica: plan (+ execute), or apply the oldest results.
  void StepSomeReplica(TestHarness& h) {
    const std::vector<ReplicaId> ids = h.scheduler().replica_ids();
    const ReplicaId r = ids[rng_() % ids.size()];
    const bool can_plan = h.scheduler().CanPlan(r);
    if (h.NumQueuedResults(r) > 0 && (!can_plan || Uniform(0, 1) == 0)) {
      absl::Status s = h.ApplyOldest(r);
      ASSERT_TRUE(s.ok()) << s;
    } else if (can_plan) {
      absl::StatusOr<std::string> d = h.PlanAndExecute(r);
      ASSERT_TRUE(d.ok()) << d.status();
      const StepPlan& plan = h.last_plan();
      ASSERT_LE(plan.num_scheduled_tokens(), Options().max_num_batched_tokens);
      if (!PlanIsEmpty(plan)) ++steps_;
    }
  }

  // Removes the replicas whose drain is over; a finished drain re-queues nothing.
  void ReleaseDrained(TestHarness& h) {
    for (ReplicaId r : h.scheduler().replica_ids()) {
      if (!h.scheduler().ReplicaDrained(r)) continue;
      const int64_t retries = h.scheduler().counters().retries_total;
      ASSERT_TRUE(h.RemoveReplica(r).ok());
      ASSERT_EQ(h.scheduler().counters().retries_total, retries);
      ++released_;
    }
  }
  // A draining replica, or an invalid id.
  ReplicaId SomeDraining(TestHarness& h) {
    for (const ReplicaMetrics& r : h.scheduler().Metrics().replicas) {
      if (r.draining) return r.replica;
    }
    return ReplicaId(0);
  }

  std::mt19937_64 rng_;
  int64_t steps_ = 0;
  int64_t released_ = 0;
};

TEST_P(PlannerModelTest, RandomOperationsMatchReferenceModel) {
  TestHarness h(Options(), {40, 24});
  std::vector<RequestId> live;
  int64_t added = 0, rejected = 0, cancelled = 0, removals = 0, drains = 0;
  for (int32_t op = 0; op < GetParam().num_ops; ++op) {
    const int32_t kind = Uniform(0, 99);
    if (kind < 14) {
      absl::StatusOr<RequestId> id = h.Add(RandomSpec(h.now()));
      if (id.ok()) {
        live.push_back(*id);
        ++added;
      } else {
        ASSERT_THAT(id.status(), StatusIs(absl::StatusCode::kResourceExhausted)) << id.status();
        ++rejected;
      }
    } else if (kind < 17 && !live.empty()) {
      const size_t i = rng_() % live.size();
      absl::Status s = h.scheduler().AbortRequest(live[i], FinishReason::kCancelled, h.now());
      ASSERT_TRUE(s.ok() || s.code() == absl::StatusCode::kNotFound) << s;
      cancelled += s.ok() ? 1 : 0;
      live[i] = live.back();
      live.pop_back();
    } else if (kind < 20) {
      h.Advance(absl::Milliseconds(Uniform(1, 15)));
    } else if (kind == 20 && Uniform(0, 9) == 0) {
      // A replica's workers are fenced; a fresh one attaches.
      const std::vector<ReplicaId> ids = h.scheduler().replica_ids();
      ASSERT_TRUE(h.RemoveReplica(ids[rng_() % ids.size()]).ok());
      h.AddReplica(Uniform(0, 1) == 0 ? 40 : 24);
      ++removals;
    } else if (kind == 21 && Uniform(0, 4) == 0 && h.scheduler().replica_ids().size() < 4) {
      // Scale-down and scale-up: a replica starts draining; a fresh one attaches.
      const std::vector<ReplicaId> ids = h.scheduler().replica_ids();
      ASSERT_TRUE(h.scheduler().DrainReplica(ids[rng_() % ids.size()]).ok());
      h.AddReplica(Uniform(0, 1) == 0 ? 40 : 24);
      ++drains;
    } else if (kind == 22 && Uniform(0, 9) == 0 && SomeDraining(h).value() != 0) {
      ASSERT_TRUE(h.RemoveReplica(SomeDraining(h)).ok());  // its drain timed out
      ++removals;
    } else {
      StepSomeReplica(h);
      if (HasFatalFailure()) return;
    }
    ReleaseDrained(h);
    if (HasFatalFailure()) return;
    absl::Status s = h.Collect();
    ASSERT_TRUE(s.ok()) << "op " << op << ": " << s;
    s = h.scheduler().CheckInvariants();
    ASSERT_TRUE(s.ok()) << "op " << op << ": " << s;
    s = h.VerifyNewlyFinished();
    ASSERT_TRUE(s.ok()) << "op " << op << ": " << s;
  }
  // Drain: no more arrivals; everything finishes.
  for (int i = 0; i < 200000 && (h.scheduler().num_unfinished_requests() > 0 ||
                                  h.NumQueuedResultsTotal() > 0);
       ++i) {
    StepSomeReplica(h);
    if (HasFatalFailure()) return;
    ReleaseDrained(h);
    // A sequence that only a draining replica fits waits there: time its drain out.
    if (i % 5000 == 4999 && SomeDraining(h).value() != 0) {
      ASSERT_TRUE(h.RemoveReplica(SomeDraining(h)).ok());
    }
    ASSERT_TRUE(h.Collect().ok());
    ASSERT_TRUE(h.scheduler().CheckInvariants().ok()) << h.scheduler().CheckInvariants();
  }
  ASSERT_EQ(h.scheduler().num_unfinished_requests(), 0);
  for (ReplicaId r : h.scheduler().replica_ids()) {
    while (h.scheduler().CanPlan(r)) {  // deliver the last finished ids
      ASSERT_TRUE(h.PlanAndExecute(r).ok());
      if (PlanIsEmpty(h.last_plan())) break;
      ASSERT_TRUE(h.ApplyOldest(r).ok());
    }
  }
  absl::Status s = h.VerifyNewlyFinished();
  EXPECT_TRUE(s.ok()) << s;
  s = h.VerifyAllFinishedOnce();
  EXPECT_TRUE(s.ok()) << s;
  const SchedulerMetrics m = h.scheduler().Metrics();
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.num_running + m.num_waiting, 0);
  // The run exercised what it claims to.
  EXPECT_GT(added, GetParam().num_ops / 20);
  EXPECT_GT(steps_, GetParam().num_ops / 4);
  EXPECT_GT(cancelled, 0);
  EXPECT_GT(removals, 0);
  EXPECT_GT(drains, 0);
  EXPECT_GT(released_, 0) << "no drain ever finished";
  if (GetParam().policy != PolicyKind::kStatic) {
    EXPECT_GT(m.counters.preemptions_total, 0);
  }
  EXPECT_GT(m.counters.prefix_cache_hit_tokens_total, 0);
  std::cerr << PolicyKindName(GetParam().policy) << " in-flight " << GetParam().steps_in_flight
            << ": ops " << GetParam().num_ops << ", requests " << added << " (+" << rejected
            << " rejected), steps " << steps_ << ", preemptions " << m.counters.preemptions_total
            << ", prefix-hit tokens " << m.counters.prefix_cache_hit_tokens_total
            << ", discarded " << m.counters.discarded_tokens_total << ", retries "
            << m.counters.retries_total << ", drains " << drains << " (" << released_
            << " released drained)\n";
}

INSTANTIATE_TEST_SUITE_P(
    Policies, PlannerModelTest,
    ::testing::Values(ModelConfig{PolicyKind::kDecodeFirst, 1, 100000, 1},
                      ModelConfig{PolicyKind::kDecodeFirst, 2, 100000, 2},
                      ModelConfig{PolicyKind::kPrefillFirst, 1, 40000, 3},
                      ModelConfig{PolicyKind::kPrefillFirst, 2, 40000, 4},
                      ModelConfig{PolicyKind::kStatic, 1, 40000, 5},
                      ModelConfig{PolicyKind::kStatic, 2, 40000, 6}),
    ConfigName);

}  // namespace
}  // namespace weft

// TestHarness: a Scheduler wired to one FakeWorker per replica, a virtual clock and an
// output collector, for planner tests. Steps can be synchronous (Step) or pipelined
// (PlanAndExecute now, ApplyOldest later). Describe() renders a plan compactly for
// table-driven tests:
//   "*1:10"  new sequence of request 1 (sample 0), 10 tokens scheduled
//   "*1.2:0" new sequence, request 1 sample 2 (a fork: 0 tokens, samples)
//   "2:1"    cached sequence of request 2, 1 token
//   "-3"     request 3 preempted        "x4" request 4 finished (worker drops it)
//   "c5>6"   copy block 5 into block 6
// VerifyFinished() checks every finished sequence against FakeModel::Reference: a
// normal finish must match exactly, an abort must be a prefix.
// Test-only. Thread-safety: thread-compatible.
#ifndef WEFT_SCHEDULER_TESTING_HARNESS_H_
#define WEFT_SCHEDULER_TESTING_HARNESS_H_

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "scheduler/scheduler.h"
#include "scheduler/testing/fake_worker.h"

namespace weft {

std::string Describe(const StepPlan& plan);

struct CollectedOutput {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish_reason = FinishReason::kNone;
  int32_t num_finishes = 0;
  bool request_finished = false;
  RequestUsage usage;
};

class TestHarness {
 public:
  static constexpr int32_t kVocab = 64;
  static constexpr int32_t kEos = 0;

  // `text`: give the scheduler a FakeTokenText (needed for stop strings).
  TestHarness(SchedulerOptions options, const std::vector<int32_t>& replica_blocks,
              bool text = true);

  Scheduler& scheduler() { return *scheduler_; }
  const FakeModel& model() const { return model_; }
  absl::Time now() const { return now_; }
  void Advance(absl::Duration d) { now_ += d; }
  ReplicaId replica(int index = 0) const { return replica_ids_[index]; }

  // A constrained request (spec.constraint set) needs `grammar`; its outputs do not
  // follow FakeModel::Reference (the masks change them): Verify* skips it.
  absl::StatusOr<RequestId> Add(const RequestSpec& spec,
                                std::shared_ptr<const SequenceGrammarFactory> grammar = nullptr);
  // Convenience: prompt of `prompt_len` tokens (ids first_token, first_token + 1, ...
  // modulo the vocabulary), ignore_eos.
  RequestId AddSimple(int32_t prompt_len, int32_t max_tokens, int32_t priority = 0,
                      int32_t n = 1, int32_t first_token = 10);

  // Plans and executes one step on `r`'s worker; results wait in a queue. Returns
  // Describe(plan) ("" when nothing was planned).
  absl::StatusOr<std::string> PlanAndExecute(ReplicaId r);
  absl::Status ApplyOldest(ReplicaId r);
  // The oldest step failed on the worker: its results are dropped and the scheduler told
  // (Scheduler::FailStep). Returns the number of requests it ended.
  absl::StatusOr<int> FailOldest(ReplicaId r);
  size_t NumQueuedResults(ReplicaId r) const;
  // Synchronous step on replica `index`: plan, execute, apply. CHECK-fails on error.
  std::string Step(int index = 0);
  const StepPlan& last_plan() const { return plan_; }

  absl::Status RemoveReplica(ReplicaId r);
  // `max_steps_in_flight` 0: the scheduler's.
  ReplicaId AddReplica(int32_t num_blocks, int32_t max_steps_in_flight = 0);

  // Drains the scheduler's outputs into the per-sequence collectors.
  absl::Status Collect();
  const CollectedOutput& output(RequestId id, int32_t sample = 0) {
    return outputs_[SequenceRef{id, sample}];
  }
  // Checks every finished sequence against the reference model.
  absl::Status VerifyFinished() const;
  // Same, only for sequences that finished since the last call (cheap per step).
  absl::Status VerifyNewlyFinished();
  // Every sequence of every request added so far finished exactly once.
  absl::Status VerifyAllFinishedOnce() const;
  size_t NumQueuedResultsTotal() const;

 private:
  struct ReplicaState {
    std::unique_ptr<FakeWorker> worker;
    std::deque<std::pair<StepId, std::vector<StepToken>>> results;
  };

  absl::Status VerifyOne(SequenceRef ref, const CollectedOutput& out) const;

  SchedulerOptions options_;
  FakeModel model_;
  FakeTokenText text_;
  std::unique_ptr<Scheduler> scheduler_;
  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::vector<ReplicaId> replica_ids_;
  std::map<ReplicaId, ReplicaState> replicas_;
  std::map<RequestId, RequestSpec> specs_;
  absl::flat_hash_map<SequenceRef, CollectedOutput> outputs_;
  std::vector<SequenceRef> newly_finished_;
  std::vector<SequenceOutput> scratch_;
  std::vector<StepToken> sampled_;
  StepPlan plan_;
  bool text_enabled_;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_TESTING_HARNESS_H_

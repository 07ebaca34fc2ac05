// StepDispatcher: the engine's steps — plan, send, apply or fail.
//
// PlanSteps asks the scheduler core for every step a replica can take now (up to
// max_steps_in_flight, so step t+1 is planned while t runs), serializes each plan once
// and sends the same bytes to every rank of the replica, and starts its deadline (the
// replica's StepTracker). OnResult takes one rank's StepResult; when every rank answered
// a step (StepTracker), the core applies it — its tokens checked against the plan, their
// logprobs kept for the calls that asked (ClientStreams) — or, when a worker reported an
// error, the core fails it (Scheduler::FailStep: that step's requests end INTERNAL). The
// core holds the one record of a step in flight; this holds none. A result that breaks
// the protocol (an unexpected step, ranks that disagree, tokens the core refuses) is
// returned as an error: the replica must be fenced (ReplicaSupervisor).
// Thread-safety: not thread-safe; owned by the engine's planning thread (the step
// counter may be read from any thread).
#ifndef WEFT_SCHEDULER_SERVICE_STEP_DISPATCH_H_
#define WEFT_SCHEDULER_SERVICE_STEP_DISPATCH_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "scheduler/scheduler.h"
#include "scheduler/service/client_streams.h"
#include "scheduler/service/metrics.h"
#include "scheduler/service/replica_supervisor.h"
#include "weft/v1/worker.pb.h"

namespace weft {

class StepDispatcher {
 public:
  // `core`, `streams` and `metrics` outlive this.
  StepDispatcher(Scheduler* core, ClientStreams* streams, ServiceMetrics* metrics)
      : core_(core), streams_(streams), metrics_(metrics) {}

  // Plans and sends every step `replica` can take now.
  void PlanSteps(ReplicaState& replica, absl::Time now);
  // One rank's result. Applies (or fails) each step it completes, oldest first. An
  // error means the replica broke the protocol and must be fenced; its message is the
  // reason.
  absl::Status OnResult(ReplicaState& replica, weft::v1::StepResult&& result,
                        absl::Time now);

  // Steps completed on all replicas (any thread).
  int64_t steps_completed() const { return steps_completed_.load(); }

 private:
  absl::Status ApplyStep(ReplicaState& replica, const StepTracker::ResultOutcome& step,
                         absl::Time now);

  Scheduler* const core_;
  ClientStreams* const streams_;
  ServiceMetrics* const metrics_;
  std::atomic<int64_t> steps_completed_{0};
  weft::v1::SchedulerMessage plan_message_;  // its plan is the scratch plan of every step
  std::vector<StepToken> tokens_scratch_;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_STEP_DISPATCH_H_

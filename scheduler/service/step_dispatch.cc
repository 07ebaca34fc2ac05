#include "scheduler/service/step_dispatch.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/plan/step_plan.h"
#include "glog/logging.h"

namespace weft {
namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

}  // namespace

void StepDispatcher::PlanSteps(ReplicaState& rs, absl::Time now) {
  while (core_->CanPlan(rs.id)) {
    const absl::Time start = absl::Now();
    StepPlan& plan = *plan_message_.mutable_plan();  // reused: keeps its capacity
    absl::Status s = core_->Plan(rs.id, now, &plan);
    if (!s.ok()) {
      LOG(ERROR) << "planning replica '" << rs.name << "': " << s;
      return;
    }
    if (PlanIsEmpty(plan)) return;
    const grpc::ByteBuffer bytes = WorkerHandle::Encode(plan_message_);  // once for all ranks
    for (const auto& rank : rs.ranks) rank->Send(bytes);
    rs.tracker->OnPlanSent(plan.step_id(), plan.num_scheduled_tokens(), now);
    metrics_->plan_seconds.Increment(Seconds(absl::Now() - start));
  }
}

absl::Status StepDispatcher::OnResult(ReplicaState& rs, weft::v1::StepResult&& r,
                                      absl::Time now) {
  for (StepTracker::ResultOutcome& o : rs.tracker->OnResult(std::move(r), now)) {
    if (o.outcome == StepTracker::Outcome::kUnexpected ||
        o.outcome == StepTracker::Outcome::kDisagree) {
      return absl::FailedPreconditionError(o.message);
    }
    if (o.outcome == StepTracker::Outcome::kComplete) {
      if (absl::Status s = ApplyStep(rs, o, now); !s.ok()) return s;
      continue;
    }
    absl::StatusOr<int> ended = core_->FailStep(rs.id, StepId(o.step_id), now);
    if (!ended.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot retire failed step: ", ended.status().message()));
    }
    LOG(WARNING) << "replica '" << rs.name << "' failed step " << o.step_id << ": " << o.message
                 << "; ended its " << *ended << " requests";
  }
  return absl::OkStatus();
}

absl::Status StepDispatcher::ApplyStep(ReplicaState& rs, const StepTracker::ResultOutcome& step,
                                       absl::Time now) {
  const weft::v1::StepResult& r = step.result;
  const absl::Time start = absl::Now();
  metrics_->worker_forward_seconds.Increment(std::max(0.0, r.forward_seconds()));
  metrics_->worker_execute_seconds.Increment(std::max(0.0, r.execute_seconds()));
  // The core checks the tokens against the plan (count, order, vocabulary).
  tokens_scratch_.clear();
  for (const weft::v1::SampledToken& t : r.tokens()) {
    tokens_scratch_.push_back(
        StepToken{SequenceRef::FromSeqId(t.seq_id()), t.token_id(), streams_->KeepLogprobs(t)});
  }
  absl::Status s = core_->ApplyResults(rs.id, StepId(step.step_id), tokens_scratch_, now);
  if (!s.ok()) return absl::FailedPreconditionError(absl::StrCat("bad result: ", s.message()));
  rs.steps->Increment();
  steps_completed_.fetch_add(1);
  metrics_->step_duration.Observe(Seconds(now - step.sent));
  metrics_->plan_seconds.Increment(Seconds(absl::Now() - start));
  return absl::OkStatus();
}

}  // namespace weft

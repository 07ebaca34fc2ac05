#include "scheduler/service/step_dispatch.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/plan/step_plan.h"
#include "glog/logging.h"

namespace weft {
namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// What the engine remembers of a plan until its result: the order of its samples and
// the requests it touches (sorted, unique).
InFlightPlan Remember(const StepPlan& plan, absl::Time now) {
  InFlightPlan inflight;
  inflight.step_id = plan.step_id();
  inflight.sent = now;
  SampledSequences(plan, &inflight.sample_order);
  for (const auto& n : plan.new_sequences()) {
    inflight.requests.push_back(SequenceRef::FromSeqId(n.seq_id()).request_id);
  }
  for (const auto& c : plan.cached_sequences()) {
    inflight.requests.push_back(SequenceRef::FromSeqId(c.seq_id()).request_id);
  }
  std::sort(inflight.requests.begin(), inflight.requests.end());
  inflight.requests.erase(std::unique(inflight.requests.begin(), inflight.requests.end()),
                          inflight.requests.end());
  return inflight;
}

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
    rs.in_flight.push_back(Remember(plan, now));
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
    InFlightPlan plan = std::move(rs.in_flight.front());
    rs.in_flight.pop_front();
    absl::Status s = o.outcome == StepTracker::Outcome::kError
                         ? FailStep(rs, plan, o.message, now)
                         : ApplyStep(rs, plan, o.result, now);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status StepDispatcher::ApplyStep(ReplicaState& rs, const InFlightPlan& plan,
                                       const weft::v1::StepResult& r, absl::Time now) {
  const absl::Time start = absl::Now();
  metrics_->worker_forward_seconds.Increment(std::max(0.0, r.forward_seconds()));
  metrics_->worker_execute_seconds.Increment(std::max(0.0, r.execute_seconds()));
  // The core checks the tokens against the plan (count, order, vocabulary).
  tokens_scratch_.clear();
  for (const weft::v1::SampledToken& t : r.tokens()) {
    tokens_scratch_.push_back(
        SampledToken{SequenceRef::FromSeqId(t.seq_id()), t.token_id(), streams_->KeepLogprobs(t)});
  }
  absl::Status s = core_->ApplyResults(rs.id, StepId(plan.step_id), tokens_scratch_, now);
  if (!s.ok()) return absl::FailedPreconditionError(absl::StrCat("bad result: ", s.message()));
  rs.steps->Increment();
  steps_completed_.fetch_add(1);
  metrics_->step_duration.Observe(Seconds(now - plan.sent));
  metrics_->plan_seconds.Increment(Seconds(absl::Now() - start));
  return absl::OkStatus();
}

absl::Status StepDispatcher::FailStep(ReplicaState& rs, const InFlightPlan& plan,
                                      const std::string& why, absl::Time now) {
  LOG(WARNING) << "replica '" << rs.name << "' failed step " << plan.step_id << ": " << why
               << "; ending its " << plan.requests.size() << " requests";
  for (RequestId id : plan.requests) (void)core_->AbortRequest(id, FinishReason::kError, now);
  // The core still expects this step's tokens; they belong to finished sequences now
  // and are discarded.
  tokens_scratch_.clear();
  for (SequenceRef ref : plan.sample_order) tokens_scratch_.push_back(SampledToken{ref, 0, -1});
  absl::Status s = core_->ApplyResults(rs.id, StepId(plan.step_id), tokens_scratch_, now);
  if (!s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot retire failed step: ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace weft

#include "scheduler/service/replica_supervisor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace weft {
namespace {

weft::v1::SchedulerMessage DrainStatusMessage(bool done, int64_t num_requeued) {
  weft::v1::SchedulerMessage m;
  m.mutable_drain_status()->set_done(done);
  m.mutable_drain_status()->set_num_requeued(static_cast<int32_t>(num_requeued));
  return m;
}

}  // namespace

ReplicaSupervisor::ReplicaSupervisor(Scheduler* core, ExpectedModel model,
                                     StepDeadlineOptions step_deadline,
                                     absl::Duration drain_timeout, ServiceMetrics* metrics)
    : core_(core),
      model_(model),
      step_deadline_(step_deadline),
      metrics_(metrics),
      // Epochs unique across scheduler restarts (see ReplicaRegistry).
      registry_(std::move(model), absl::ToUnixMicros(absl::Now())),
      drains_(drain_timeout) {}

// --- Hello, reject, admission ---------------------------------------------------------

void ReplicaSupervisor::OnHello(const std::shared_ptr<WorkerHandle>& w,
                                const weft::v1::WorkerHello& h, absl::Time now) {
  HelloOutcome out = registry_.OnHello(w, h, now);
  for (auto& old : out.displaced) {
    old->Close(absl::UnavailableError("displaced by a newer process for the same rank"));
  }
  if (!out.displaced_replica.empty()) {
    FenceRanks(out.displaced_replica, kFenceReattached, "a rank re-attached", {}, now);
  }
  for (auto& loser : out.losers) Reject(loser, h.replica(), out.losers_reason);
  switch (out.kind) {
    case HelloOutcome::kRejected:
      LOG(WARNING) << "worker " << h.worker_id() << " is rank " << h.rank() << " of "
                   << h.world_size();
      if (out.protocol_mismatch) metrics_->worker_protocol_mismatches.Increment();
      Reject(w, h.replica(), out.reject_reason);
      return;
    case HelloOutcome::kPending:
      LOG(INFO) << "replica '" << h.replica() << "': rank " << h.rank() << " of "
                << h.world_size() << " attached (" << h.worker_id() << "); waiting for the others";
      return;
    case HelloOutcome::kAdmitted:
      Admit(*out.replica);
      return;
  }
}

void ReplicaSupervisor::Reject(const std::shared_ptr<WorkerHandle>& w, const std::string& replica,
                               const std::string& reason) {
  metrics_->workers_rejected.Increment();
  LOG(WARNING) << "rejecting worker " << w->peer() << " (replica '" << replica << "'): " << reason;
  weft::v1::SchedulerMessage m;
  m.mutable_reject()->set_reason(reason);
  w->Send(m);
  w->Close(absl::FailedPreconditionError(reason));
}

int32_t StepsInFlightFor(const std::string& backend) {
  return backend == "cuda" || backend == "null" ? 2 : 1;
}

void ReplicaSupervisor::Admit(const AdmittedReplica& r) {
  ReplicaOptions ro;
  ro.num_blocks = r.num_kv_blocks;
  ro.block_size = model_.block_size;
  if (steps_in_flight_by_backend_ && !r.ranks.empty()) {
    ro.max_steps_in_flight = StepsInFlightFor(r.ranks[0].hello.backend());
  }
  auto id = core_->AddReplica(ro);
  if (!id.ok()) {
    LOG(ERROR) << "cannot add replica '" << r.name << "': " << id.status();
    FenceOutcome f = registry_.Fence(r.name);
    for (auto& handle : f.other_ranks) handle->Close(id.status());
    return;
  }
  ReplicaState rs;
  rs.name = r.name;
  rs.id = *id;
  rs.tracker = std::make_unique<StepTracker>(step_deadline_, r.world_size);
  rs.steps = &metrics_->Steps(r.name);
  for (const RankInfo& rank : r.ranks) {
    rs.ranks.push_back(rank.handle);
    weft::v1::SchedulerMessage m;
    weft::v1::Welcome* wl = m.mutable_welcome();
    wl->set_replica(r.name);
    wl->set_num_kv_blocks(r.num_kv_blocks);
    wl->set_first_step_id(1);
    wl->set_comm_init(r.comm_init);
    wl->set_epoch(r.epoch);
    rank.handle->Send(m);
  }
  LOG(INFO) << "replica '" << r.name << "' admitted: TP " << r.world_size << ", "
            << r.num_kv_blocks << " KV blocks, epoch " << r.epoch << ", backend "
            << r.ranks[0].hello.backend() << " (" << r.ranks[0].hello.kernels() << "), "
            << (ro.max_steps_in_flight > 0 ? absl::StrCat(ro.max_steps_in_flight)
                                           : std::string("default"))
            << " steps in flight";
  replicas_.emplace(r.name, std::move(rs));
}

ReplicaState* ReplicaSupervisor::FindByHandle(int64_t handle_id) {
  const AdmittedReplica* r = registry_.FindByHandle(handle_id);
  if (r == nullptr) return nullptr;
  auto it = replicas_.find(r->name);
  return it == replicas_.end() ? nullptr : &it->second;
}

// --- Fencing ----------------------------------------------------------------------------

void ReplicaSupervisor::OnGone(const std::shared_ptr<WorkerHandle>& w, absl::Time now) {
  FenceOutcome f = registry_.OnGone(w);
  if (f.replica.empty()) return;
  FenceRanks(f.replica, kFenceWorkerGone,
             absl::StrCat("worker stream ", w->id(), " (", w->peer(), ") ended"), f.other_ranks,
             now);
}

void ReplicaSupervisor::Fence(const std::string& name, const char* cause,
                              const std::string& detail, absl::Time now) {
  if (replicas_.count(name) == 0) return;
  FenceRanks(name, cause, detail, registry_.Fence(name).other_ranks, now);
}

void ReplicaSupervisor::FenceRanks(const std::string& name, const char* cause,
                                   const std::string& detail,
                                   const std::vector<std::shared_ptr<WorkerHandle>>& other_ranks,
                                   absl::Time now) {
  auto it = replicas_.find(name);
  if (it == replicas_.end()) return;
  LOG(WARNING) << "fencing replica '" << name << "' (" << cause << "): " << detail;
  for (auto& h : other_ranks) {
    h->Close(absl::UnavailableError(absl::StrCat("replica fenced: ", detail)));
  }
  DropReplica(it, now);
  // Counted once the replica is gone: a scrape that sees the fence sees it gone too.
  metrics_->Fenced(cause).Increment();
}

int64_t ReplicaSupervisor::DropReplica(std::map<std::string, ReplicaState>::iterator it,
                                       absl::Time now) {
  const int64_t before = core_->counters().retries_total;
  absl::Status s = core_->RemoveReplica(it->second.id, now);
  if (!s.ok()) LOG(ERROR) << "removing replica '" << it->first << "' from the core: " << s;
  const int64_t requeued = core_->counters().retries_total - before;
  metrics_->requeued_requests.Increment(static_cast<double>(requeued));
  drains_.End(it->first);
  metrics_->ReplicaGone(it->first);
  replicas_.erase(it);
  return requeued;
}

void ReplicaSupervisor::CloseAll(const absl::Status& status) {
  for (auto& [name, rs] : replicas_) {
    for (auto& h : rs.ranks) h->Close(status);
  }
  // Ranks waiting for their peers hold a stream too: the server's Shutdown would wait
  // for it until its deadline.
  for (auto& h : registry_.PendingRanks()) h->Close(status);
}

// --- Timers -----------------------------------------------------------------------------

void ReplicaSupervisor::CheckStepDeadlines(absl::Time now) {
  std::vector<std::string> late;
  for (auto& [name, rs] : replicas_) {
    if (rs.tracker->CheckDeadline(now)) late.push_back(name);
  }
  for (const std::string& name : late) {
    Fence(name, kFenceStepDeadlines,
          absl::StrCat("missed ", step_deadline_.max_misses, " step deadlines"), now);
  }
}

void ReplicaSupervisor::CheckDrains(absl::Time now) {
  if (drains_.size() == 0) return;
  std::vector<std::pair<std::string, bool>> finished;  // name, timed out
  for (const auto& [name, deadline] : drains_.deadlines()) {
    auto it = replicas_.find(name);
    if (it == replicas_.end()) continue;
    if (core_->ReplicaDrained(it->second.id)) {
      finished.emplace_back(name, false);
    } else if (deadline <= now) {
      finished.emplace_back(name, true);
    }
  }
  for (const auto& [name, timed_out] : finished) FinishDrain(name, timed_out, now);
}

absl::Time ReplicaSupervisor::NextDeadline() const {
  absl::Time next = drains_.NextDeadline();
  for (const auto& [name, rs] : replicas_) next = std::min(next, rs.tracker->NextDeadline());
  return next;
}

bool ReplicaSupervisor::Progressing() const {
  for (const auto& [name, rs] : replicas_) {
    if (rs.tracker->misses() == 0 && !drains_.Contains(name)) return true;
  }
  return false;
}

// --- Scale-down: worker drains ------------------------------------------------------------

void ReplicaSupervisor::OnDrainRequest(const std::shared_ptr<WorkerHandle>& w,
                                       const weft::v1::DrainRequest& r, absl::Time now) {
  ReplicaState* rs = FindByHandle(w->id());
  if (rs == nullptr) {
    // Not (or no longer) part of an admitted replica, e.g. a rank still waiting for the
    // others: it holds nothing, so it may go at once.
    LOG(INFO) << "worker stream " << w->id() << " (" << w->peer()
              << ") asks to drain but serves no replica: released";
    w->Send(DrainStatusMessage(/*done=*/true, 0));
    w->Close(absl::OkStatus());
    return;
  }
  if (!drains_.Begin(rs->name, now)) return;  // already draining
  absl::Status s = core_->DrainReplica(rs->id);
  if (!s.ok()) LOG(ERROR) << "draining replica '" << rs->name << "' in the core: " << s;
  LOG(INFO) << "replica '" << rs->name << "' drains (worker " << w->peer() << ": "
            << (r.reason().empty() ? "shutting down" : r.reason())
            << "): no new sequences; running ones may finish for up to "
            << absl::FormatDuration(drains_.timeout());
  for (const auto& rank : rs->ranks) rank->Send(DrainStatusMessage(/*done=*/false, 0));
}

void ReplicaSupervisor::FinishDrain(const std::string& name, bool timed_out, absl::Time now) {
  auto it = replicas_.find(name);
  if (it == replicas_.end()) return;
  std::vector<std::shared_ptr<WorkerHandle>> ranks = registry_.Fence(name).other_ranks;
  const int64_t requeued = DropReplica(it, now);
  if (timed_out) {
    LOG(WARNING) << "replica '" << name << "': drain timed out after "
                 << absl::FormatDuration(drains_.timeout()) << "; " << requeued
                 << " requests re-queued with their tokens; replica detached";
  } else {
    LOG(INFO) << "replica '" << name << "' drained: detached";
  }
  for (auto& h : ranks) {
    h->Send(DrainStatusMessage(/*done=*/true, requeued));
    h->Close(absl::OkStatus());
  }
}

}  // namespace weft

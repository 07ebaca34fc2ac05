// Engine, continued: scale-down. A worker rank that gets SIGTERM sends DrainRequest;
// its whole replica drains (see engine.h and Scheduler::DrainReplica).
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "scheduler/service/engine.h"

namespace weft {
namespace {

weft::v1::SchedulerMessage DrainStatusMessage(bool done, int64_t num_requeued) {
  weft::v1::SchedulerMessage m;
  m.mutable_drain_status()->set_done(done);
  m.mutable_drain_status()->set_num_requeued(static_cast<int32_t>(num_requeued));
  return m;
}

}  // namespace

void Engine::HandleDrainRequest(const std::shared_ptr<WorkerHandle>& w,
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

void Engine::CheckDrains(absl::Time now) {
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

void Engine::FinishDrain(const std::string& name, bool timed_out, absl::Time now) {
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

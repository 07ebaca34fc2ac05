// ReplicaSupervisor: the engine's replicas, from a worker's hello to the end of its
// replica — supervision and fencing.
//
// Hellos go to the ReplicaRegistry, which forms tensor-parallel replicas; an admitted one
// is added to the scheduler core and each rank is welcomed (with the epoch it names its
// group by), a worker that does not fit gets a Reject, a rank that re-attaches displaces
// its predecessor. A replica whose stream breaks, that misses max_misses step deadlines
// (its StepTracker), or that breaks the protocol (the engine's step dispatch says so) is
// fenced: its ranks' streams are closed (they re-attach and start clean under a new
// epoch) and the core re-queues its requests on the other replicas.
// Scale-down: a rank's DrainRequest drains its whole replica — the core places nothing
// new there, every rank is told (DrainStatus), the running sequences finish; once the
// replica is empty, or drain_timeout after the request (the rest is then re-queued
// elsewhere with its tokens, as for a fence), every rank gets DrainStatus{done} and its
// stream ends OK. A draining replica is not ready.
// Every stream it ends is ended with an absl::Status (translated at the RPC edge).
// Thread-safety: not thread-safe; owned by the engine's planning thread.
#ifndef WEFT_SCHEDULER_SERVICE_REPLICA_SUPERVISOR_H_
#define WEFT_SCHEDULER_SERVICE_REPLICA_SUPERVISOR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "scheduler/scheduler.h"
#include "scheduler/service/metrics.h"
#include "scheduler/service/replica_drain.h"
#include "scheduler/service/replica_registry.h"
#include "scheduler/service/step_tracker.h"
#include "scheduler/service/worker_link.h"

namespace weft {

// An admitted replica as the planning thread works with it.
struct ReplicaState {
  std::string name;
  ReplicaId id;
  std::vector<std::shared_ptr<WorkerHandle>> ranks;  // index = rank
  std::unique_ptr<StepTracker> tracker;  // its steps' deadlines and ranks' answers
  prometheus::Counter* steps = nullptr;
};

// Steps planned ahead for a replica whose workers run `backend` (its hello's), with
// --max_steps_in_flight=0: 2 (plan step t+1 while t runs) where the forward does not
// compete with the planning thread for host cores — "cuda" (measured +2-22 % tok/s at
// 256 streams on an H100, issue 19) and "null" (+4-11 % at 64 on 2 CPU cores) — and 1
// for "cpu", whose forward uses every core the planning thread would overlap it with.
int32_t StepsInFlightFor(const std::string& backend);

class ReplicaSupervisor {
 public:
  // `core` and `metrics` outlive this.
  ReplicaSupervisor(Scheduler* core, ExpectedModel model, StepDeadlineOptions step_deadline,
                    absl::Duration drain_timeout, ServiceMetrics* metrics);

  void OnHello(const std::shared_ptr<WorkerHandle>& w, const weft::v1::WorkerHello& hello,
               absl::Time now);
  // Each replica admitted from now on may have StepsInFlightFor(its backend) steps in
  // flight, instead of the core's max_steps_in_flight for all.
  void set_steps_in_flight_by_backend(bool on) { steps_in_flight_by_backend_ = on; }
  // A worker stream ended: its replica (if admitted) is fenced.
  void OnGone(const std::shared_ptr<WorkerHandle>& w, absl::Time now);
  void OnDrainRequest(const std::shared_ptr<WorkerHandle>& w, const weft::v1::DrainRequest& r,
                      absl::Time now);
  // Fences the admitted replica `name` (no-op if unknown). `cause` labels
  // weft_replicas_fenced_total: one of the fixed kFence* names, never free text (a
  // worker's message or a stream id would grow the label set without bound); `detail`
  // goes to the log and to the other ranks.
  static constexpr char kFenceWorkerGone[] = "worker_gone";
  static constexpr char kFenceStepDeadlines[] = "step_deadlines";
  static constexpr char kFenceStepError[] = "step_error";
  static constexpr char kFenceReattached[] = "rank_reattached";
  void Fence(const std::string& name, const char* cause, const std::string& detail,
             absl::Time now);
  // Fences the replicas that missed max_misses step deadlines.
  void CheckStepDeadlines(absl::Time now);
  // Releases the draining replicas that are empty or whose drain timed out.
  void CheckDrains(absl::Time now);
  // When a step deadline or a drain deadline is next due.
  absl::Time NextDeadline() const;
  // Ends every stream it knows — admitted ranks and ranks still waiting for their
  // peers — with `status` (the scheduler stops).
  void CloseAll(const absl::Status& status);

  // The admitted replica a worker stream belongs to, or nullptr.
  ReplicaState* FindByHandle(int64_t handle_id);
  std::map<std::string, ReplicaState>& replicas() { return replicas_; }
  size_t num_pending_ranks() const { return registry_.num_pending_ranks(); }
  size_t num_draining() const { return drains_.size(); }
  // Some replica makes progress: its steps are not overdue and it does not drain.
  bool Progressing() const;

 private:
  // Welcomes the ranks of a replica the registry admitted and adds it to the core.
  void Admit(const AdmittedReplica& r);
  void Reject(const std::shared_ptr<WorkerHandle>& w, const std::string& replica,
              const std::string& reason);
  // Closes `other_ranks` (the registry already forgot the replica) and drops it.
  void FenceRanks(const std::string& name, const char* cause, const std::string& detail,
                  const std::vector<std::shared_ptr<WorkerHandle>>& other_ranks, absl::Time now);
  // Removes an admitted replica from the core (re-queueing what it still holds), from
  // replicas_ and from drains_; returns the number of requests re-queued.
  int64_t DropReplica(std::map<std::string, ReplicaState>::iterator it, absl::Time now);
  void FinishDrain(const std::string& name, bool timed_out, absl::Time now);

  Scheduler* const core_;
  const ExpectedModel model_;
  const StepDeadlineOptions step_deadline_;
  ServiceMetrics* const metrics_;
  bool steps_in_flight_by_backend_ = false;
  ReplicaRegistry registry_;
  ReplicaDrains drains_;
  std::map<std::string, ReplicaState> replicas_;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_REPLICA_SUPERVISOR_H_

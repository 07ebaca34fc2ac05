// Engine: weft-scheduler's planning thread and everything it owns.
//
// gRPC callbacks never touch scheduling state: they call the EngineInterface methods,
// which only push an event into a bounded, lock-guarded inbox and return. One thread
// drains the inbox and owns the scheduler core (requests, block tables, planner), the
// replica registry (TP groups formed from worker hellos), one StepTracker per replica
// (adaptive step deadlines, rank agreement) and the per-request outboxes it pushes
// responses into. Each loop iteration: handle events, check timers (request deadlines,
// step deadlines → fence, stalled readers → RESOURCE_EXHAUSTED), plan every replica that
// can take a step (up to max_steps_in_flight, so step t+1 is planned while t runs),
// stream outputs, update metrics and health.
//
// Failure handling: a replica whose stream breaks, that misses max_misses step
// deadlines, whose ranks disagree or that breaks the protocol is fenced: its ranks'
// streams are closed (they re-attach and start clean under a new epoch) and the core
// re-queues its requests on the remaining replicas (up to the retry cap, else they end
// UNAVAILABLE). A step a worker reports failed ends that step's requests with INTERNAL;
// nothing leaks: the core frees blocks in the same call that finishes a request.
//
// Scale-down (engine_drain.cc): a rank's DrainRequest drains its whole replica — the
// core places nothing new there, every rank is told (DrainStatus), the running
// sequences finish; once the replica is empty, or worker_drain_timeout after the
// request (the rest is then re-queued elsewhere with its tokens, as for a fence), every
// rank gets DrainStatus{done} and its stream ends OK. A draining replica is not ready.
// Thread-safety: EngineInterface methods, BeginDrain, WaitDrained and Stop are
// thread-safe; everything else runs on the planning thread.
#ifndef WEFT_SCHEDULER_SERVICE_ENGINE_H_
#define WEFT_SCHEDULER_SERVICE_ENGINE_H_

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "scheduler/scheduler.h"
#include "scheduler/service/engine_interface.h"
#include "scheduler/service/metrics.h"
#include "scheduler/service/replica_drain.h"
#include "scheduler/service/replica_registry.h"
#include "scheduler/service/step_tracker.h"

namespace weft {

struct EngineOptions {
  SchedulerOptions core;
  StepDeadlineOptions step_deadline;
  // A stream whose queued responses wait this long without a write completing ends
  // RESOURCE_EXHAUSTED (the slow-reader guard).
  absl::Duration stall_timeout = absl::Seconds(10);
  // Inbox bound for submissions (other events are bounded by the number of streams).
  size_t max_inbox_submissions = 8192;
  // Longest the loop sleeps while requests exist (request deadlines, stalls).
  absl::Duration tick = absl::Milliseconds(20);
  // A draining replica's running sequences may take this long to finish; then the
  // rest is re-queued on other replicas (generated tokens kept).
  absl::Duration worker_drain_timeout = absl::Seconds(60);

  absl::Status Validate() const;
};

class Engine : public EngineInterface {
 public:
  using HealthFn = std::function<void(bool serving)>;

  Engine(EngineOptions options, ExpectedModel model, weft::v1::ModelInfo info,
         const TokenTextSource* text, ServiceMetrics* metrics, HealthFn set_health);
  ~Engine() override;

  absl::Status Start();
  // Ends the loop (pending streams are ended UNAVAILABLE) and joins the thread.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // SIGTERM: not ready at once, new calls UNAVAILABLE; running streams go on.
  void BeginDrain() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until no request is unfinished or `deadline` passes; then ends the rest
  // UNAVAILABLE. Returns the number of requests that had to be ended.
  int WaitDrained(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // EngineInterface.
  absl::Status Submit(Submission submission) override ABSL_LOCKS_EXCLUDED(mu_);
  void Cancel(int64_t key) override;
  void OnWorkerMessage(const std::shared_ptr<WorkerHandle>& worker,
                       weft::v1::WorkerMessage message) override;
  void OnWorkerGone(const std::shared_ptr<WorkerHandle>& worker) override;
  weft::v1::ModelInfo ModelInfo() const override;

  // For tests: steps completed on all replicas, admitted replicas.
  int64_t steps_completed() const { return steps_completed_.load(); }
  int num_replicas() const { return num_replicas_.load(); }

 private:
  struct SubmitEvent { Submission submission; };
  struct CancelEvent { int64_t key; };
  struct MessageEvent {
    std::shared_ptr<WorkerHandle> worker;
    weft::v1::WorkerMessage message;
  };
  struct GoneEvent { std::shared_ptr<WorkerHandle> worker; };
  struct AbortAllEvent { FinishReason reason; };
  using Event = std::variant<SubmitEvent, CancelEvent, MessageEvent, GoneEvent, AbortAllEvent>;

  struct ActiveRequest {
    int64_t key = 0;
    std::shared_ptr<Outbox> outbox;
    int32_t num_logprobs = -1;
    uint64_t seed = 0;
    absl::Time arrival;
    std::vector<absl::Time> last_token_time;  // per sample
    bool sent_first = false;
    bool got_first_token = false;
    // Set when the engine ended the stream itself (slow reader): the status the client
    // gets, counted instead of the core's finish reason.
    std::optional<absl::Status> ended_with;
  };
  struct InFlightPlan {
    int64_t step_id = 0;
    std::vector<SequenceRef> sample_order;
    std::vector<RequestId> requests;  // every request with a sequence in the plan
    absl::Time sent;
  };
  struct ReplicaState {
    std::string name;
    ReplicaId id;
    std::vector<std::shared_ptr<WorkerHandle>> ranks;
    std::unique_ptr<StepTracker> tracker;
    std::deque<InFlightPlan> in_flight;
    prometheus::Counter* steps = nullptr;
  };
  // Per-token logprobs of the results applied this iteration (SampledToken::aux indexes it).
  struct TokenLogprobs {
    float logprob = 0;
    std::vector<std::pair<int32_t, float>> top;
  };

  // Queues an event for the planning thread; false (dropped) once the loop has stopped.
  bool Push(Event event) ABSL_LOCKS_EXCLUDED(mu_);
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Time NextWake(absl::Time now) const;
  void Handle(Event& event, absl::Time now);
  void HandleSubmit(Submission& s, absl::Time now);
  void HandleHello(const std::shared_ptr<WorkerHandle>& w, const weft::v1::WorkerHello& h,
                   absl::Time now);
  void HandleResult(const std::shared_ptr<WorkerHandle>& w, const weft::v1::StepResult& r,
                    absl::Time now);
  void ApplyStep(ReplicaState* rs, const InFlightPlan& plan, const weft::v1::StepResult& r,
                 absl::Time now);
  void FailStep(ReplicaState* rs, const InFlightPlan& plan, const std::string& why,
                absl::Time now);
  void Fence(const std::string& name, const std::string& reason,
             std::vector<std::shared_ptr<WorkerHandle>> other_ranks, absl::Time now);
  // Removes an admitted replica from the core (re-queueing what it still holds) and
  // from replicas_ and drains_; returns the number of requests re-queued.
  int64_t DropReplica(std::map<std::string, ReplicaState>::iterator it, absl::Time now);
  // Scale-down (engine_drain.cc).
  void HandleDrainRequest(const std::shared_ptr<WorkerHandle>& w, const weft::v1::DrainRequest& r,
                          absl::Time now);
  // Finishes the drains whose replica is empty or whose deadline passed.
  void CheckDrains(absl::Time now);
  void FinishDrain(const std::string& name, bool timed_out, absl::Time now);
  void PlanReplicas(absl::Time now);
  void Deliver(absl::Time now);
  void CheckTimers(absl::Time now);
  void AbortAll(FinishReason reason, absl::Time now);
  void UpdateGaugesAndHealth() ABSL_LOCKS_EXCLUDED(mu_);
  ReplicaState* FindByHandle(int64_t handle_id);

  const EngineOptions options_;
  const ExpectedModel model_;
  const weft::v1::ModelInfo info_;
  const TokenTextSource* const text_;
  ServiceMetrics* const metrics_;
  const HealthFn set_health_;

  // Inbox.
  mutable Mutex mu_;
  CondVar wake_;
  std::deque<Event> inbox_ ABSL_GUARDED_BY(mu_);
  size_t inbox_submissions_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t unfinished_ ABSL_GUARDED_BY(mu_) = 0;  // published by the loop for WaitDrained
  CondVar drained_cv_;

  std::atomic<bool> draining_{false};
  std::atomic<int> num_replicas_{0};
  std::atomic<int64_t> steps_completed_{0};
  std::thread thread_;

  // Planning-thread state.
  std::unique_ptr<Scheduler> core_;
  ReplicaRegistry registry_;
  std::map<std::string, ReplicaState> replicas_;
  ReplicaDrains drains_;
  absl::flat_hash_map<RequestId, ActiveRequest> requests_;
  absl::flat_hash_map<int64_t, RequestId> by_key_;
  // Streams of finished requests still writing their last responses (see CheckTimers).
  std::vector<std::shared_ptr<Outbox>> lingering_;
  std::vector<SequenceOutput> outputs_;
  std::vector<TokenLogprobs> step_logprobs_;
  std::vector<SampledToken> tokens_scratch_;
  weft::v1::SchedulerMessage plan_message_;  // its plan is the scratch plan of every step
  absl::Time last_stall_check_ = absl::InfinitePast();
  absl::Time next_occupancy_sample_ = absl::InfinitePast();  // KV waste sampling
  bool last_health_ = false;
  bool health_set_ = false;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_ENGINE_H_

// Engine: weft-scheduler's planning thread — the loop that owns the scheduler core and
// the three parts that work on it.
//
// gRPC callbacks and HTTP calls never touch scheduling state: they call the
// EngineInterface methods, which only push an event into a bounded, lock-guarded inbox
// and return. One thread drains the inbox and owns:
//   * the scheduler core (requests, block tables, planner);
//   * ClientStreams (client_streams.h): admission and outboxes — submit, cancel, stream
//     the core's outputs to the calls, request deadlines, readers that stalled;
//   * ReplicaSupervisor (replica_supervisor.h): replicas from a worker's hello to their
//     end — the registry of TP groups, welcome/reject, step deadlines, fencing, worker
//     drains (scale-down);
//   * StepDispatcher (step_dispatch.h): steps — plan, encode once for every rank, apply a
//     completed step or fail its requests; a result that breaks the protocol fences.
// Each loop iteration: handle events, check timers (request deadlines, stalled readers,
// step deadlines), plan every replica that can take a step, release drained replicas,
// stream outputs, update metrics and health. Every ending the engine gives a call or a
// worker stream is an absl::Status: it meets gRPC only at the reactors (ToGrpcStatus)
// and HTTP only in openai::ErrorFor. Stop ends every call and worker stream the engine
// holds or still has events for, ranks waiting for their peers included.
// Thread-safety: EngineInterface methods, BeginDrain, WaitDrained and Stop are
// thread-safe; everything else runs on the planning thread.
#ifndef WEFT_SCHEDULER_SERVICE_ENGINE_H_
#define WEFT_SCHEDULER_SERVICE_ENGINE_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <variant>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "scheduler/scheduler.h"
#include "scheduler/service/client_streams.h"
#include "scheduler/service/engine_interface.h"
#include "scheduler/service/grammar_admission.h"
#include "scheduler/service/metrics.h"
#include "scheduler/service/replica_supervisor.h"
#include "scheduler/service/step_dispatch.h"

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
  // When a stream's tokens travel in groups (stream_interval.h).
  StreamIntervalOptions stream_interval;
  // Each replica's steps in flight from its workers' backend (StepsInFlightFor), rather
  // than core.max_steps_in_flight for all.
  bool steps_in_flight_by_backend = false;

  absl::Status Validate() const;
};

class Engine : public EngineInterface {
 public:
  using HealthFn = std::function<void(bool serving)>;

  Engine(EngineOptions options, ExpectedModel model, weft::v1::ModelInfo info,
         const TokenTextSource* text, ServiceMetrics* metrics, HealthFn set_health);
  ~Engine() override;

  // Structured output's compiler (borrowed; must outlive the engine). Without one, a
  // request with a constraint ends INVALID_ARGUMENT. Call before Start.
  void set_grammar_service(GrammarCompileService* service) { grammar_service_ = service; }

  absl::Status Start();
  // Ends the loop (pending calls and worker streams are ended UNAVAILABLE) and joins
  // the thread.
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
  int64_t steps_completed() const { return steps_ ? steps_->steps_completed() : 0; }
  int num_replicas() const { return num_replicas_.load(); }
  // For tests: waits until `done()` holds, checking it after each iteration of the
  // planning loop (where the engine's state, its gauges and num_replicas change); false
  // if `deadline` (a hang guard) passes first. `done` runs on the caller's thread.
  bool WaitUntil(const std::function<bool()>& done, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);

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

  // Queues an event for the planning thread; false (dropped) once the loop has stopped.
  bool Push(Event event) ABSL_LOCKS_EXCLUDED(mu_);
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends what the stopped loop still holds: the calls and worker streams of `events`
  // (never handled), every request, every worker stream.
  void EndEverything(std::deque<Event>& events) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Time NextWake(absl::Time now) const;
  void Handle(Event& event, absl::Time now);
  void HandleWorkerMessage(const std::shared_ptr<WorkerHandle>& w,
                           weft::v1::WorkerMessage& m, absl::Time now);
  void UpdateGaugesAndHealth() ABSL_LOCKS_EXCLUDED(mu_);

  const EngineOptions options_;
  const ExpectedModel model_;
  const weft::v1::ModelInfo info_;
  const TokenTextSource* const text_;
  ServiceMetrics* const metrics_;
  const HealthFn set_health_;
  GrammarCompileService* grammar_service_ = nullptr;
  std::unique_ptr<GrammarAdmission> grammars_;  // made by Start; the planning thread's

  // Inbox.
  mutable Mutex mu_;
  CondVar wake_;
  std::deque<Event> inbox_ ABSL_GUARDED_BY(mu_);
  size_t inbox_submissions_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool grammar_ready_ ABSL_GUARDED_BY(mu_) = false;  // a parked compile finished
  int64_t unfinished_ ABSL_GUARDED_BY(mu_) = 0;  // published by the loop for WaitDrained
  CondVar drained_cv_;
  uint64_t iterations_ ABSL_GUARDED_BY(mu_) = 0;  // loop iterations done (WaitUntil)
  CondVar iteration_cv_;

  std::atomic<bool> draining_{false};
  std::atomic<int> num_replicas_{0};
  std::thread thread_;

  // Planning-thread state (made by Start).
  std::unique_ptr<Scheduler> core_;
  std::unique_ptr<ClientStreams> streams_;
  std::unique_ptr<ReplicaSupervisor> replicas_;
  std::unique_ptr<StepDispatcher> steps_;
  absl::Time next_occupancy_sample_ = absl::InfinitePast();  // KV waste sampling
  bool last_health_ = false;
  bool health_set_ = false;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_ENGINE_H_

// Scheduler: the heart of weft-scheduler, as a pure library (no gRPC, no model, no
// device). It owns every request, each replica's KV block table and queues, and plans
// per-iteration StepPlans; the services layer feeds it requests, results and time, and
// streams its outputs.
//
// Life of a request: AddRequest takes a request validated against options().limits
// (request_spec.h; stop strings without a TokenTextSource, or a request no replica can
// ever hold → INVALID_ARGUMENT; no replica → UNAVAILABLE; queue full →
// RESOURCE_EXHAUSTED) and routes its first sequence to a replica's waiting queue. Plan(replica) admits and schedules it (StepPlan documents
// the worker side). ApplyResults(replica, step, tokens) appends sampled tokens, checks
// stop conditions (max_tokens, EOS, stop tokens, stop strings) and emits
// SequenceOutputs (tokens, a streamable text delta, the finish). Cancellation and
// deadlines finish it at once: its blocks are freed in that call and the next plan
// tells the workers to drop it.
//
// Pipelining: up to max_steps_in_flight steps per replica may be planned before their
// results are applied (in order). Planning already counts the tokens of steps in
// flight as computed; a sequence that finishes while a later step for it is in flight
// has that step's token discarded.
//
// Replicas: AddReplica/RemoveReplica. Removing a replica (its workers were fenced)
// drops its steps in flight and blocks, and re-queues its sequences on the remaining
// replicas for recompute (prompt + tokens so far), one retry per request; past
// max_retries, or with no replica left, they finish kUnavailable.
//
// Draining (a worker shutting down): DrainReplica stops placing sequences on the
// replica — it admits nothing from its waiting queue, whose sequences (and any it
// preempts later) are routed to the other replicas, and is routed nothing while another
// replica takes work — and lets its running sequences go on. Once ReplicaDrained,
// RemoveReplica re-queues nothing; called before (the drain timed out) it re-queues
// what remains as above. A sequence no other replica fits (every replica drains, or
// only a draining one is large enough) waits in a draining replica's queue for a
// replica to be added (or for that drain to end).
// Scale-up: adding a replica routes every waiting sequence again (as if it arrived now),
// so a replica that attaches under load takes its share of the queue at its first step.
//
// Time is whatever clock the caller passes (`now`): wall time in the service, a
// virtual clock in the simulator.
//
// Ownership: owns all requests and replicas; borrows the TokenTextSource.
// Thread-safety: thread-compatible. One planning thread owns a Scheduler; other
// threads talk to that thread through its inboxes (services layer), never to this.
#ifndef WEFT_SCHEDULER_SCHEDULER_H_
#define WEFT_SCHEDULER_SCHEDULER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/strong_id.h"
#include "scheduler/planner.h"
#include "scheduler/policy.h"
#include "scheduler/replica.h"
#include "scheduler/request_spec.h"
#include "scheduler/scheduler_options.h"
#include "scheduler/sequence.h"
#include "common/plan/step_plan.h"
#include "scheduler/token_text_source.h"
#include "scheduler/types.h"

namespace weft {

struct ReplicaMetrics {
  ReplicaId replica;
  int32_t num_running = 0;   // sequences
  int32_t num_waiting = 0;   // sequences queued here
  int32_t kv_blocks_used = 0;    // referenced
  int32_t kv_blocks_cached = 0;  // cached-free (reusable prefix blocks)
  int32_t kv_blocks_total = 0;
  int32_t steps_in_flight = 0;
  int64_t steps_planned = 0;
  bool draining = false;
};

// KV slots held by running sequences against the tokens they store (a block shared by
// several sequences counts once per owner): waste = 1 - tokens / slots.
struct KvOccupancy {
  int64_t tokens = 0;
  int64_t slots = 0;
};

struct SchedulerMetrics {
  int32_t num_requests = 0;  // unfinished
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  int32_t kv_blocks_used = 0;
  int32_t kv_blocks_cached = 0;
  int32_t kv_blocks_total = 0;
  int32_t num_draining_replicas = 0;
  SchedulerCounters counters;
  std::vector<ReplicaMetrics> replicas;
};

class Scheduler {
 public:
  // `text` may be null: then no text is produced and stop strings are rejected.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(const SchedulerOptions& options,
                                                           const TokenTextSource* text);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // --- Replicas -----------------------------------------------------------------
  absl::StatusOr<ReplicaId> AddReplica(const ReplicaOptions& options);
  // The replica's workers are gone: see the header comment.
  absl::Status RemoveReplica(ReplicaId id, absl::Time now);
  // The replica's workers are shutting down: see the header comment. Idempotent;
  // NOT_FOUND for an unknown replica.
  absl::Status DrainReplica(ReplicaId id);
  // True when the replica drains and holds nothing (no sequence running or waiting, no
  // step in flight): removing it now re-queues nothing.
  bool ReplicaDrained(ReplicaId id) const;

  // --- Requests -----------------------------------------------------------------
  // A request with a constraint needs `grammar`, its compiled grammar (the services
  // layer compiles it off the planning thread); INVALID_ARGUMENT without. Its sequences
  // then sample only what the grammar allows, one step at a time (never pipelined); a
  // token the grammar refuses (a worker that ignored the mask) ends the sequence kError.
  absl::StatusOr<RequestId> AddRequest(
      const ValidRequest& request, absl::Time now,
      std::shared_ptr<const SequenceGrammarFactory> grammar = nullptr);
  // Finishes every unfinished sequence of the request with `reason` (kCancelled,
  // kDeadline, kError or kUnavailable). NOT_FOUND if unknown or already finished.
  absl::Status AbortRequest(RequestId id, FinishReason reason, absl::Time now);
  // Finishes requests whose deadline is ≤ now (Plan calls it too).
  void ExpireDeadlines(absl::Time now);

  // --- Steps --------------------------------------------------------------------
  // False when the replica is unknown or has max_steps_in_flight steps in flight.
  bool CanPlan(ReplicaId id) const;
  // Plans the replica's next step into `plan`. An empty plan (plan->empty(), step_id
  // 0) means nothing to send now. FAILED_PRECONDITION when too many steps are in
  // flight; NOT_FOUND for an unknown replica.
  absl::Status Plan(ReplicaId id, absl::Time now, StepPlan* plan);
  // Applies the results of the replica's oldest step in flight, which must be `step`
  // (FAILED_PRECONDITION otherwise). `tokens` must match the plan's sampling order
  // exactly (INVALID_ARGUMENT otherwise, nothing applied: the caller should fence the
  // replica).
  absl::Status ApplyResults(ReplicaId id, StepId step, absl::Span<const StepToken> tokens,
                            absl::Time now);
  // The replica's oldest step in flight, which must be `step` (FAILED_PRECONDITION
  // otherwise), failed on a worker: every request with a sequence in it finishes kError
  // (its blocks freed; the workers are told to drop the sequences they still hold) and
  // the step is retired without results. Returns the number of requests it ended.
  absl::StatusOr<int> FailStep(ReplicaId id, StepId step, absl::Time now);

  // Moves every output produced since the last call into *out (cleared first).
  void TakeOutputs(std::vector<SequenceOutput>* out);

  // --- Introspection --------------------------------------------------------------
  SchedulerMetrics Metrics() const;
  const SchedulerCounters& counters() const { return counters_; }
  // O(running sequences): for sampled metrics, not for every step.
  KvOccupancy Occupancy() const;
  const SchedulerOptions& options() const { return options_; }
  int32_t num_unfinished_requests() const { return num_unfinished_requests_; }
  std::vector<ReplicaId> replica_ids() const;
  // Read-only access for tests and debugging; null if unknown or erased.
  const Sequence* FindSequence(SequenceRef ref) const;
  // O(everything) consistency check, for tests: block ownership equals ref counts,
  // counters match recounts, states match queue membership.
  absl::Status CheckInvariants() const;

 private:
  Scheduler(const SchedulerOptions& options, std::unique_ptr<SchedulingPolicy> policy,
            const TokenTextSource* text);

  Replica* FindReplica(ReplicaId id) const;
  // The replica a waiting sequence should queue on (draining ones only when no other
  // fits it); null if none fits it.
  Replica* Route(const Sequence& seq) const;
  // Routes the waiting sequences of `only` (of every replica when null) again, in queue
  // order; one that no other replica fits stays where it was.
  void RerouteWaiting(Replica* only);
  int32_t NumWaiting() const;
  void ApplyToken(Sequence* seq, int32_t token, int32_t aux, absl::Time now);
  // Finishes `seq` (frees blocks, leaves queues, owes the workers a finished id) and
  // fills the finish fields of `out`.
  void FinishSequence(Sequence* seq, FinishReason reason, absl::Time now, SequenceOutput* out);
  void AbortInternal(Request* request, FinishReason reason, absl::Time now);
  // Erases the request once it is finished and no step in flight refers to it.
  void MaybeErase(Request* request);
  void RequeueDisplaced(const std::vector<Sequence*>& displaced, absl::Time now);
  absl::Status CheckReplica(const Replica& replica) const;

  const SchedulerOptions options_;
  const std::unique_ptr<SchedulingPolicy> policy_;
  const TokenTextSource* const text_;
  const StopContext stop_context_;
  SchedulerCounters counters_;
  // Structured output's mask fills (before the sequences: joined after them; a fill in
  // flight owns what it uses).
  MaskThreads mask_threads_;
  Planner planner_;
  std::map<ReplicaId, std::unique_ptr<Replica>> replicas_;
  int32_t next_replica_id_ = 1;
  absl::flat_hash_map<RequestId, std::unique_ptr<Request>> requests_;
  int64_t next_request_id_ = 1;
  int32_t num_unfinished_requests_ = 0;
  absl::btree_set<std::pair<absl::Time, RequestId>> deadlines_;
  std::vector<SequenceOutput> outbox_;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SCHEDULER_H_

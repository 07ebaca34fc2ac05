// Replica: the scheduler's state for one data-parallel replica — its KV cache
// manager, its running set and waiting queue (both ordered by SeqKey), the steps it
// has in flight, and the diff entries owed to its workers' next plan. The add/remove
// methods keep the incremental counters (running, prefilling, waiting demand) exact,
// so the planner never scans everything to learn them. A draining replica (its workers
// are shutting down) admits nothing from its waiting queue; the Scheduler routes nothing
// to it while another replica takes work.
//
// Ownership: owns its KvCacheManager; holds non-owning Sequence* (the sequences are
// owned by their Requests, which outlive any reference from here: a request is erased
// only once no queue, running set or in-flight step refers to it).
// Thread-safety: thread-compatible (the planning thread owns it).
#ifndef WEFT_SCHEDULER_REPLICA_H_
#define WEFT_SCHEDULER_REPLICA_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/container/btree_map.h"
#include "common/strong_id.h"
#include "scheduler/kv_cache_manager.h"
#include "scheduler/sequence.h"
#include "scheduler/types.h"

namespace weft {

// A planned step whose results have not been applied yet: the one record of a step in
// flight (the services layer keeps only its deadline and the ranks' answers).
struct InFlightStep {
  StepId step_id;
  std::vector<Sequence*> samplers;  // in the order results come back
  // Every request with a sequence in the plan (sorted, unique): what a failed step ends.
  std::vector<RequestId> requests;
};

class Replica {
 public:
  using SeqMap = absl::btree_map<SeqKey, Sequence*>;

  Replica(ReplicaId id, KvCacheManager kv, int32_t max_steps_in_flight = 1)
      : id_(id), kv_(std::move(kv)), max_steps_in_flight_(max_steps_in_flight) {}
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  ReplicaId id() const { return id_; }
  int32_t max_steps_in_flight() const { return max_steps_in_flight_; }
  KvCacheManager& kv() { return kv_; }
  const KvCacheManager& kv() const { return kv_; }

  const SeqMap& running() const { return running_; }
  const SeqMap& waiting() const { return waiting_; }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  int32_t num_prefilling() const { return num_prefilling_; }
  int64_t waiting_demand_blocks() const { return waiting_demand_blocks_; }

  // Set membership; each also sets or clears seq->replica.
  void AddRunning(Sequence* seq);
  void RemoveRunning(Sequence* seq);
  void AddWaiting(Sequence* seq);
  void RemoveWaiting(Sequence* seq);
  // Re-counts a running sequence as prefilling (uncomputed ≥ 2) or not.
  void UpdatePrefilling(Sequence* seq);

  bool draining() const { return draining_; }
  void set_draining() { draining_ = true; }
  // Nothing running, waiting or in flight: a draining replica in this state is drained.
  bool Empty() const { return running_.empty() && waiting_.empty() && in_flight_.empty(); }

  std::deque<InFlightStep>& in_flight() { return in_flight_; }
  const std::deque<InFlightStep>& in_flight() const { return in_flight_; }
  // Sequences that finished while the workers held their state: listed in finished_seq_ids
  // of the next plan.
  std::vector<SequenceRef>& pending_finished() { return pending_finished_; }

  StepId next_step_id() const { return StepId(next_step_); }
  void ConsumeStepId() { ++next_step_; }

  // Recycled vectors for in-flight records (no allocation per step).
  std::vector<Sequence*> TakeSpareVector();
  void ReturnSpareVector(std::vector<Sequence*> v);

 private:
  const ReplicaId id_;
  KvCacheManager kv_;
  int32_t max_steps_in_flight_;
  SeqMap running_;
  SeqMap waiting_;
  int32_t num_prefilling_ = 0;
  int64_t waiting_demand_blocks_ = 0;
  bool draining_ = false;
  std::deque<InFlightStep> in_flight_;
  std::vector<SequenceRef> pending_finished_;
  int64_t next_step_ = 1;
  std::vector<std::vector<Sequence*>> spare_vectors_;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_REPLICA_H_

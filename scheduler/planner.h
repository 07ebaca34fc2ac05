// Planner: builds one iteration's StepPlan for one replica. It fills the token budget
// (max_num_batched_tokens) under the sequence cap (max_num_seqs) in the passes the
// policy orders (running decodes, running chunked prefills, admissions), in queue order
// within each pass (higher priority first, FCFS within a priority):
//   * running sequences get min(uncomputed, budget left) tokens — a chunk of prefill or
//     one decode token; decodes beyond max_tokens are not planned;
//   * when a running sequence cannot get a block, the planner preempts by recompute:
//     the victim is the lowest-priority, latest-arrived running sequence that is not
//     yet scheduled in this iteration, ranks at or after the requester (possibly the
//     requester itself: a victim is never more important than the requester) and has
//     been preempted fewer than max_preemptions_per_sequence times (a cap lifted only
//     when nothing else was scheduled yet, so capped sequences cannot stall forever).
//     Its blocks are freed and it goes back to the waiting queue, ahead of everything
//     that arrived after it in its priority class, keeping its generated tokens. With no eligible
//     victim the requester waits this iteration (the sequences scheduled before it
//     progress, finish and free blocks);
//   * admissions take the longest cached prefix, stop at the first sequence that does
//     not fit (FCFS: no overtaking), keep the admission watermark of free blocks, and
//     do not happen in an iteration that preempted nor on a draining replica;
//   * when sample 0 of a fresh n > 1 request computes its last prompt token, its other
//     samples are forked from it (shared prompt blocks; the partial block copied).
// Full blocks computed in this iteration are registered in the prefix cache after all
// passes, so no sequence of the same step reuses KV that the step itself writes.
//
// Cost: O(running + changes·log n) per iteration; scratch vectors are reused, so the
// steady state allocates nothing but new plan entries' payloads.
// Ownership: borrows options, policy and counters (owned by the Scheduler).
// Thread-safety: thread-compatible.
#ifndef WEFT_SCHEDULER_PLANNER_H_
#define WEFT_SCHEDULER_PLANNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "scheduler/policy.h"
#include "scheduler/replica.h"
#include "scheduler/scheduler_options.h"
#include "scheduler/sequence.h"
#include "common/plan/step_plan.h"

namespace weft {

class Planner {
 public:
  Planner(const SchedulerOptions* options, const SchedulingPolicy* policy,
          SchedulerCounters* counters)
      : options_(options), policy_(policy), counters_(counters) {}

  // Plans the next step of `replica` into `plan` (cleared first). An empty plan
  // (PlanIsEmpty) consumes no step id and records nothing in flight.
  void Plan(Replica* replica, absl::Time now, StepPlan* plan);

 private:
  struct Step {
    Replica* replica;
    StepPlan* plan;
    int64_t step;
    int32_t budget;
    bool preempted = false;
    size_t victim_cursor = 0;  // order_[0, victim_cursor) may still hold victims
    absl::Time now;
    absl::Time mask_deadline;  // masks not ready by then: their rows wait a step
    int32_t masks_late = 0;
  };

  // The policy's passes in order. Plan runs them again, waiting for every mask, when
  // the first run scheduled nothing because masks were late.
  void RunPasses(Step& st);
  void RunDecodes(Step& st);
  void RunPrefills(Step& st);
  void AdmitWaiting(Step& st);
  // Gets blocks for `n` more tokens of running `seq` (preempting if needed) and
  // schedules them. False when `seq` was preempted or must wait.
  // `index` is seq's position in order_.
  bool ScheduleRunning(Step& st, Sequence* seq, size_t index, int32_t n);
  bool TryAdmit(Step& st, Sequence* seq);
  // Advances num_computed_tokens by n (blocks already held), emits the plan entry and
  // forks waiting siblings when this samples sample 0's first token.
  void Commit(Step& st, Sequence* seq, int32_t n);
  bool IsVictimCandidate(const Step& st, const Sequence* seq) const;
  // The lowest-priority, latest-arrived candidate at or after order_[requester_index];
  // null when none (the requester waits).
  Sequence* PickVictim(Step& st, size_t requester_index);
  void Preempt(Step& st, Sequence* victim);
  void Emit(Step& st, Sequence* seq, int32_t num_computed_before, int32_t n, bool sample);
  // The entry of a sequence the workers do not hold: everything they need. A fork
  // (`fork_parent` set) samples from its parent's logits in this step.
  void EmitNew(Step& st, Sequence* seq, int32_t num_computed_before, int32_t n, bool sample,
               const Sequence* fork_parent);
  void ForkSiblings(Step& st, Sequence* parent);
  bool ForkOne(Step& st, Sequence* parent, Sequence* child);
  void Finalize(Step& st);
  bool OutputLimitReached(const Sequence& seq) const;
  // Structured output: a constrained sequence whose sampled token is not back yet.
  bool AwaitsGrammarToken(const Sequence& seq) const;
  // Structured output: true (counted) when `seq` is constrained and its next mask is
  // still not ready at st.mask_deadline (waiting for it until then): the row waits a
  // step and the others go on (a plan with nothing else waits for it instead).
  bool MaskLate(Step& st, Sequence* seq);
  // Moves the sequence's next-token mask into the plan entry (empty: all allowed); waits
  // for it only where MaskLate was not asked (a fork's siblings, sampling with their
  // parent: their first masks started when the request arrived).
  void FillMask(Sequence* seq, std::string* mask);
  int32_t WatermarkBlocks(const Replica& replica) const;

  const SchedulerOptions* options_;
  const SchedulingPolicy* policy_;
  SchedulerCounters* counters_;
  // Per-iteration scratch, reused.
  std::vector<Sequence*> order_;
  std::vector<Sequence*> scheduled_;
  std::vector<Sequence*> new_samplers_;
  std::vector<Sequence*> cached_samplers_;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_PLANNER_H_

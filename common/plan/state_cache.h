// StateCache: a worker rank's per-sequence state, kept in step with the scheduler by
// applying each StepPlan diff (vLLM v1's worker-side "cached request state") by the
// rules of step_plan.h.
//
// Written once here, not per backend or per test: every backend (through the worker's
// ModelExecutor) and the scheduler's test worker execute the StepBatch this class
// produces. For each scheduled sequence the step computes token positions
// [start_pos, start_pos + num_tokens) whose input ids are tokens[start_pos ...]; the KV of
// position p goes to block block_ids[p / block_size], slot p % block_size. A sequence is
// sampled when the plan says do_sample (which must coincide with the step reaching the
// end of its known tokens); the sampled token is then appended (so the next decode's
// input is the worker's own last sample — plans need not wait for the result round
// trip). A forked sample (n > 1) computes nothing and samples from the logits of its
// parent's entry in the same step. Block copies run after the forward pass.
//
// Any inconsistency (a step id out of order, an unknown or duplicate sequence, a block id
// out of range, a token id outside the vocabulary, a position past the known tokens or
// past the model's context length (when one is given), a computed count or sampling decision
// that differs from the scheduler's) is an error: the plan is not applied
// (state unchanged), the caller reports the step as failed and never guesses.
// Thread-safety: not thread-safe; owned by the rank's step thread.
#ifndef WEFT_COMMON_PLAN_STATE_CACHE_H_
#define WEFT_COMMON_PLAN_STATE_CACHE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/plan/step_plan.h"

namespace weft {

struct WorkerSequence {
  int64_t seq_id = 0;
  std::vector<int32_t> tokens;    // prompt followed by every output token known
  int32_t num_prompt_tokens = 0;
  int32_t num_computed_tokens = 0;
  std::vector<int32_t> block_ids;
  SamplingConfig sampling;        // checked (SamplingConfig::Check)
  int32_t sample_index = 0;       // of its request (Philox counter word 0)
  int32_t num_output_tokens = 0;  // outputs in `tokens` (Philox counter of the next one)
  // StateCache's own scratch: the Check pass that last found this sequence scheduled
  // (a duplicate entry is one already stamped by the same pass; no set per step).
  uint64_t check_stamp = 0;
};

// One sequence's share of a step.
struct ScheduledSequence {
  WorkerSequence* state = nullptr;  // owned by the StateCache; valid until the next Apply
  int32_t start_pos = 0;           // first position computed by this step
  int32_t num_tokens = 0;          // positions computed by this step
  bool sample = false;             // sample a token after this step
  // For a forked sample: index in StepBatch::sequences of the entry whose last-position
  // logits it samples from; -1 otherwise (its own last position).
  int32_t logits_from = -1;
  // Structured output: the plan's token mask for this sample (sampling_math.h "token
  // mask", checked: MaskBytes(vocab) bytes allowing at least one token), or empty. Points
  // into the plan, which must outlive the batch's use.
  absl::string_view allowed_tokens;
  // From the plan's new_sequences: the state was (re)created by this step (a re-admitted
  // sequence may replace a held one of the same id), so a backend mirroring per-sequence
  // state on a device uploads it whole.
  bool is_new = false;
};

struct StepBatch {
  int64_t step_id = 0;
  std::vector<ScheduledSequence> sequences;  // plan order: new ones first, then cached
  std::vector<std::pair<int32_t, int32_t>> block_copies;  // (src, dst), after the step
  int32_t num_tokens = 0;
  int32_t num_sampled = 0;
  // The plan's finished and preempted sequences, whose state this step dropped (a
  // backend's device mirror frees theirs; one may come back as a new entry).
  std::vector<int64_t> dropped_seq_ids;
};

class StateCache {
 public:
  // `context_length` > 0: no step computes a position at or past it (the model's limit;
  // with it, a batch from Apply is everything Backend::Step needs checked).
  StateCache(int32_t block_size, int32_t num_blocks, int32_t vocab_size,
             int32_t context_length = 0)
      : block_size_(block_size),
        num_blocks_(num_blocks),
        vocab_size_(vocab_size),
        context_length_(context_length) {}

  // The first plan expected is `first_step_id` (from the Welcome); clears all state.
  void Reset(int64_t first_step_id);

  // Validates and applies `plan`, filling `batch`. On error nothing changes.
  absl::Status Apply(const StepPlan& plan, StepBatch* batch);

  // Records the token sampled for a sequence of the last applied step.
  void AppendSampled(WorkerSequence* seq, int32_t token_id);

  // The step of `plan` failed on this rank (or could not be applied): count the plan as
  // consumed when its step id is the expected one, and drop the state of every sequence it
  // names. The scheduler ends those sequences' requests and lists them as finished later.
  void Fail(const StepPlan& plan);

  size_t num_sequences() const { return seqs_.size(); }
  const WorkerSequence* Find(int64_t seq_id) const;
  int64_t next_step_id() const { return next_step_id_; }

 private:
  // Stamps the sequences it finds scheduled (check_stamp); changes nothing else.
  absl::Status Check(const StepPlan& plan);
  // `end` (one past the last position a step computes) within the context length.
  absl::Status CheckContext(int64_t step, int64_t seq_id, int64_t end) const;
  absl::Status CheckBlocks(const google::protobuf::RepeatedField<int32_t>& ids) const;
  absl::Status CheckMask(int64_t step, int64_t seq_id, bool do_sample,
                         const std::string& mask) const;

  const int32_t block_size_;
  const int32_t num_blocks_;
  const int32_t vocab_size_;
  const int32_t context_length_;
  int64_t next_step_id_ = 1;
  uint64_t check_pass_ = 0;
  absl::flat_hash_map<int64_t, WorkerSequence> seqs_;
};

}  // namespace weft

#endif  // WEFT_COMMON_PLAN_STATE_CACHE_H_

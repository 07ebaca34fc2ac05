// StepDriver (tests): drives Backend::Step the way the worker's ModelExecutor does — each
// plan applied by a StateCache, the batch stepped, every sampled token appended — with
// plans built from a few calls. Sequence ids are the caller's (the sample index follows
// from the id, SequenceRef).
// Thread-safety: none.
#ifndef WEFT_WORKER_BACKENDS_TESTING_STEP_DRIVER_H_
#define WEFT_WORKER_BACKENDS_TESTING_STEP_DRIVER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/plan/state_cache.h"
#include "worker/backends/backend.h"
#include "worker/model/forward_batch.h"

namespace weft::testing {

class StepDriver {
 public:
  explicit StepDriver(Backend* backend);

  // A fresh plan (the next step id).
  StepPlan Plan();
  // A new sequence: `tokens` (the first num_prompt of them prompt), block table `blocks`,
  // computing positions [computed, tokens.size()) this step and sampling after it.
  // fork_parent != 0: a fork of that sequence (computes nothing; tokens as the parent's).
  void AddNew(StepPlan* plan, int64_t seq_id, const std::vector<int32_t>& tokens,
              int32_t num_prompt, const std::vector<int32_t>& blocks,
              const SamplingConfig& sampling, int32_t computed = 0, int64_t fork_parent = 0);
  // One decode token of a held sequence, with `new_blocks` appended to its table.
  void AddDecode(StepPlan* plan, int64_t seq_id, const std::vector<int32_t>& new_blocks = {});

  // Apply, then StepApplied.
  absl::Status Run(const StepPlan& plan, StepOutput* out);
  // Applies `plan` (an empty batch if it is rejected); returns the ForwardBatch of the
  // batch's chunks (what ForwardStepper runs: want_logits on the sampled ones), valid until
  // the next Apply — for comparing with Backend::Forward's logits of the same step.
  const ForwardBatch& Apply(const StepPlan& plan);
  // Steps the backend on the applied batch and appends every sampled token; *out holds
  // the step's samples.
  absl::Status StepApplied(StepOutput* out);

  const StateCache& cache() const { return cache_; }
  const StepBatch& batch() const { return batch_; }

 private:
  Backend* backend_;
  StateCache cache_;
  StepBatch batch_;
  ForwardBatch forward_;
  int64_t next_step_ = 1;
};

}  // namespace weft::testing

#endif  // WEFT_WORKER_BACKENDS_TESTING_STEP_DRIVER_H_

// Plans for tests of the worker's side of the contract (StateCache, backends, the CUDA
// step state): a new sequence appended to a StepPlan the way the scheduler's planner
// writes one, keeping the plan's totals.
// Thread-safety: none (test code).
#ifndef WEFT_COMMON_PLAN_TESTING_PLAN_BUILDER_H_
#define WEFT_COMMON_PLAN_TESTING_PLAN_BUILDER_H_

#include <cstdint>
#include <vector>

#include "common/plan/step_plan.h"
#include "common/sampling/sampling_config.h"

namespace weft::testing {

// Appends sequence `seq_id` (its sample index follows from the id, SequenceRef): `tokens`,
// the first `num_prompt` of them prompt, block table `blocks`, computing positions
// [computed, tokens.size()) this step and sampling after it. fork_parent != 0: a fork of
// that sequence (the caller passes computed = tokens.size(): it computes nothing).
weft::v1::NewSequence* AddNewSequence(StepPlan* plan, int64_t seq_id,
                                      const std::vector<int32_t>& tokens, int32_t num_prompt,
                                      const std::vector<int32_t>& blocks,
                                      const SamplingConfig& sampling = SamplingConfig(),
                                      int32_t computed = 0, int64_t fork_parent = 0);

}  // namespace weft::testing

#endif  // WEFT_COMMON_PLAN_TESTING_PLAN_BUILDER_H_

#include "common/plan/step_plan.h"

namespace weft {

bool PlanIsEmpty(const StepPlan& plan) {
  return plan.new_sequences().empty() && plan.cached_sequences().empty() &&
         plan.finished_seq_ids().empty() && plan.preempted_seq_ids().empty() &&
         plan.block_copies().empty();
}

void SampledSequences(const StepPlan& plan, std::vector<SequenceRef>* out) {
  out->clear();
  for (const auto& n : plan.new_sequences()) {
    if (n.do_sample()) out->push_back(SequenceRef::FromSeqId(n.seq_id()));
  }
  for (const auto& c : plan.cached_sequences()) {
    if (c.do_sample()) out->push_back(SequenceRef::FromSeqId(c.seq_id()));
  }
}

}  // namespace weft

#include "common/plan/testing/plan_builder.h"

namespace weft::testing {

weft::v1::NewSequence* AddNewSequence(StepPlan* plan, int64_t seq_id,
                                      const std::vector<int32_t>& tokens, int32_t num_prompt,
                                      const std::vector<int32_t>& blocks,
                                      const SamplingConfig& sampling, int32_t computed,
                                      int64_t fork_parent) {
  auto* n = plan->add_new_sequences();
  n->set_seq_id(seq_id);
  ToSpec(sampling, SequenceRef::FromSeqId(seq_id).sample_index, n->mutable_sampling());
  for (int32_t t : tokens) n->add_token_ids(t);
  n->set_num_prompt_tokens(num_prompt);
  n->set_num_output_tokens(static_cast<int32_t>(tokens.size()) - num_prompt);
  n->set_num_computed_tokens(computed);
  n->set_num_scheduled_tokens(static_cast<int32_t>(tokens.size()) - computed);
  for (int32_t b : blocks) n->add_block_ids(b);
  n->set_do_sample(true);
  n->set_fork_parent_seq_id(fork_parent);
  plan->set_num_scheduled_tokens(plan->num_scheduled_tokens() + n->num_scheduled_tokens());
  plan->set_num_sampled(plan->num_sampled() + 1);
  return n;
}

}  // namespace weft::testing

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

void ToSpec(const SamplingConfig& p, int32_t sample_index, weft::v1::SamplingSpec* out) {
  out->set_temperature(p.temperature);
  out->set_top_k(p.top_k);
  out->set_top_p(p.top_p);
  out->set_min_p(p.min_p);
  out->set_repetition_penalty(p.repetition_penalty);
  out->set_presence_penalty(p.presence_penalty);
  out->set_frequency_penalty(p.frequency_penalty);
  out->set_seed(p.seed);
  out->set_sample_index(sample_index);
  out->set_num_logprobs(p.num_logprobs);
}

SamplingConfig FromSpec(const weft::v1::SamplingSpec& s) {
  SamplingConfig p;
  p.temperature = s.temperature();
  p.top_k = s.top_k();
  p.top_p = s.top_p();
  p.min_p = s.min_p();
  p.repetition_penalty = s.repetition_penalty();
  p.presence_penalty = s.presence_penalty();
  p.frequency_penalty = s.frequency_penalty();
  p.seed = s.seed();
  p.num_logprobs = s.num_logprobs();
  return p;
}

}  // namespace weft

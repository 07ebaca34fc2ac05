#include "scheduler/service/plan_codec.h"

#include "absl/strings/str_cat.h"

namespace weft {
namespace {

void EncodeSampling(const SamplingParams& s, int32_t sample_index, weft::v1::SamplingSpec* out) {
  out->set_temperature(s.temperature);
  out->set_top_k(s.top_k);
  out->set_top_p(s.top_p);
  out->set_min_p(s.min_p);
  out->set_repetition_penalty(s.repetition_penalty);
  out->set_presence_penalty(s.presence_penalty);
  out->set_frequency_penalty(s.frequency_penalty);
  out->set_seed(s.seed.value_or(0));
  out->set_sample_index(sample_index);
  out->set_num_logprobs(s.logprobs);
}

}  // namespace

void EncodePlan(const StepPlan& plan, weft::v1::StepPlan* out,
                std::vector<SequenceRef>* sample_order) {
  out->Clear();
  sample_order->clear();
  out->set_step_id(plan.step_id.value());
  for (const NewSequenceData& n : plan.new_requests) {
    weft::v1::NewSequence* m = out->add_new_sequences();
    m->set_seq_id(WireSeqId(n.seq));
    m->mutable_token_ids()->Add(n.token_ids.begin(), n.token_ids.end());
    m->set_num_prompt_tokens(n.num_prompt_tokens);
    m->mutable_block_ids()->Reserve(static_cast<int>(n.block_ids.size()));
    for (BlockId b : n.block_ids) m->add_block_ids(b.value());
    m->set_num_computed_tokens(n.num_computed_tokens);
    m->set_num_scheduled_tokens(n.num_scheduled_tokens);
    EncodeSampling(n.sampling, n.seq.sample_index, m->mutable_sampling());
    m->set_num_output_tokens(static_cast<int32_t>(n.token_ids.size()) - n.num_prompt_tokens);
    m->set_do_sample(n.do_sample);
    if (n.fork_parent_sample_index >= 0) {
      m->set_fork_parent_seq_id(
          WireSeqId(SequenceRef{n.seq.request_id, n.fork_parent_sample_index}));
    }
    m->set_resumed(n.resumed);
    if (n.do_sample) sample_order->push_back(n.seq);
  }
  for (const CachedSequenceData& c : plan.cached_requests) {
    weft::v1::CachedSequence* m = out->add_cached_sequences();
    m->set_seq_id(WireSeqId(c.seq));
    for (BlockId b : c.new_block_ids) m->add_new_block_ids(b.value());
    m->set_num_computed_tokens(c.num_computed_tokens);
    m->set_num_scheduled_tokens(c.num_scheduled_tokens);
    m->set_do_sample(c.do_sample);
    if (c.do_sample) sample_order->push_back(c.seq);
  }
  for (SequenceRef r : plan.finished_ids) out->add_finished_seq_ids(WireSeqId(r));
  for (SequenceRef r : plan.preempted_ids) out->add_preempted_seq_ids(WireSeqId(r));
  for (const BlockCopy& c : plan.block_copies) {
    weft::v1::BlockCopy* m = out->add_block_copies();
    m->set_src(c.src.value());
    m->set_dst(c.dst.value());
  }
  out->set_num_scheduled_tokens(plan.total_num_scheduled_tokens);
  out->set_num_sampled(plan.num_sampled);
}

absl::Status DecodeTokens(const weft::v1::StepResult& result,
                          const std::vector<SequenceRef>& sample_order, int32_t vocab_size,
                          std::vector<SampledToken>* tokens) {
  tokens->clear();
  if (result.tokens_size() != static_cast<int>(sample_order.size())) {
    return absl::InvalidArgumentError(absl::StrCat("step ", result.step_id(), ": ",
                                                   result.tokens_size(), " tokens for ",
                                                   sample_order.size(), " samples"));
  }
  tokens->reserve(sample_order.size());
  for (size_t i = 0; i < sample_order.size(); ++i) {
    const weft::v1::SampledToken& t = result.tokens(static_cast<int>(i));
    if (FromWireSeqId(t.seq_id()) != sample_order[i]) {
      return absl::InvalidArgumentError(absl::StrCat("step ", result.step_id(), ": token ", i,
                                                     " is for sequence ", t.seq_id(),
                                                     ", expected ", WireSeqId(sample_order[i])));
    }
    if (t.token_id() < 0 || t.token_id() >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", result.step_id(), ": token id ", t.token_id(), " out of range"));
    }
    tokens->push_back(SampledToken{sample_order[i], t.token_id()});
  }
  return absl::OkStatus();
}

}  // namespace weft

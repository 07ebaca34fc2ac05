#include "worker/backends/testing/step_driver.h"

#include "absl/strings/str_cat.h"
#include "common/plan/testing/plan_builder.h"
#include "common/status_macros.h"

namespace weft::testing {

StepDriver::StepDriver(Backend* backend)
    : backend_(backend),
      cache_(backend->block_size(), backend->num_kv_blocks(), backend->config().vocab_size,
             backend->config().context_length) {
  cache_.Reset(1);
}

StepPlan StepDriver::Plan() {
  StepPlan p;
  p.set_step_id(next_step_++);
  return p;
}

void StepDriver::AddNew(StepPlan* plan, int64_t seq_id, const std::vector<int32_t>& tokens,
                        int32_t num_prompt, const std::vector<int32_t>& blocks,
                        const SamplingConfig& sampling, int32_t computed, int64_t fork_parent) {
  AddNewSequence(plan, seq_id, tokens, num_prompt, blocks, sampling, computed, fork_parent);
}

void StepDriver::AddDecode(StepPlan* plan, int64_t seq_id, const std::vector<int32_t>& new_blocks) {
  const WorkerSequence* s = cache_.Find(seq_id);
  auto* c = plan->add_cached_sequences();
  c->set_seq_id(seq_id);
  c->set_num_computed_tokens(s == nullptr ? 0 : s->num_computed_tokens);
  c->set_num_scheduled_tokens(1);
  c->set_do_sample(true);
  for (int32_t b : new_blocks) c->add_new_block_ids(b);
  plan->set_num_scheduled_tokens(plan->num_scheduled_tokens() + 1);
  plan->set_num_sampled(plan->num_sampled() + 1);
}

const ForwardBatch& StepDriver::Apply(const StepPlan& plan) {
  forward_.sequences.clear();
  const absl::Status s = cache_.Apply(plan, &batch_);
  if (!s.ok()) {
    batch_ = StepBatch();
    return forward_;
  }
  for (const ScheduledSequence& sc : batch_.sequences) {
    if (sc.num_tokens == 0) continue;
    SequenceChunk chunk;
    chunk.token_ids = absl::MakeConstSpan(sc.state->tokens).subspan(sc.start_pos, sc.num_tokens);
    chunk.start_pos = sc.start_pos;
    chunk.block_table = absl::MakeConstSpan(sc.state->block_ids);
    chunk.want_logits = sc.sample;
    forward_.sequences.push_back(chunk);
  }
  return forward_;
}

absl::Status StepDriver::StepApplied(StepOutput* out) {
  WEFT_RETURN_IF_ERROR(backend_->Step(batch_, out));
  if (out->num_samples != batch_.num_sampled) {
    return absl::InternalError(absl::StrCat("sampled ", out->num_samples, " of ",
                                            batch_.num_sampled));
  }
  int32_t k = 0;
  for (const ScheduledSequence& sc : batch_.sequences) {
    if (sc.sample) cache_.AppendSampled(sc.state, out->samples[k++].token);
  }
  return absl::OkStatus();
}

absl::Status StepDriver::Run(const StepPlan& plan, StepOutput* out) {
  const int64_t before = cache_.next_step_id();
  Apply(plan);
  if (cache_.next_step_id() == before) return absl::FailedPreconditionError("plan not applied");
  return StepApplied(out);
}

}  // namespace weft::testing

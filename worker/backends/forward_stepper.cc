#include "worker/backends/forward_stepper.h"

#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace weft {
namespace {

SamplerParams ParamsOf(const WorkerSequence& seq) { return {seq.sampling, seq.sample_index}; }

}  // namespace

absl::Status ForwardStepper::Step(Backend& backend, const StepBatch& batch, StepOutput* out) {
  out->Clear();
  forward_.sequences.clear();
  row_of_entry_.assign(batch.sequences.size(), -1);
  int32_t rows = 0;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const ScheduledSequence& sc = batch.sequences[i];
    if (sc.num_tokens == 0) continue;  // a fork: samples from its parent's row
    SequenceChunk chunk;
    chunk.token_ids = absl::MakeConstSpan(sc.state->tokens).subspan(sc.start_pos, sc.num_tokens);
    chunk.start_pos = sc.start_pos;
    chunk.block_table = absl::MakeConstSpan(sc.state->block_ids);
    chunk.want_logits = sc.sample;
    if (sc.sample) row_of_entry_[i] = rows++;
    forward_.sequences.push_back(chunk);
  }
  if (!forward_.sequences.empty()) {
    const absl::Time start = absl::Now();
    WEFT_RETURN_IF_ERROR(backend.Forward(forward_, &logits_));
    out->forward_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  }
  for (const auto& [src, dst] : batch.block_copies) {
    WEFT_RETURN_IF_ERROR(backend.CopyBlock(src, dst));
  }
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const ScheduledSequence& sc = batch.sequences[i];
    if (!sc.sample) continue;
    if (RowOf(sc, i) < 0) return absl::InternalError("no logits row for a sampled sequence");
    out->Add();
  }
  WEFT_ASSIGN_OR_RETURN(const bool on_device, SampleOnDevice(backend, batch, out));
  int32_t k = 0;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const ScheduledSequence& sc = batch.sequences[i];
    if (!sc.sample) continue;
    SampleResult& r = out->samples[k++];
    const WorkerSequence& seq = *sc.state;
    if (on_device && seq.sampling.num_logprobs < 0) continue;  // sampled there
    const auto tokens = absl::MakeConstSpan(seq.tokens);
    const auto logits = absl::MakeConstSpan(logits_.Row(RowOf(sc, i)), logits_.vocab_size);
    WEFT_RETURN_IF_ERROR(sampler_.Sample(ParamsOf(seq), logits,
                                         tokens.subspan(0, seq.num_prompt_tokens),
                                         tokens.subspan(seq.num_prompt_tokens), &r,
                                         sc.allowed_tokens));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ForwardStepper::SampleOnDevice(Backend& backend, const StepBatch& batch,
                                                    StepOutput* out) {
  device_params_.clear();
  device_requests_.clear();
  device_slots_.clear();
  int32_t k = 0;
  for (const ScheduledSequence& sc : batch.sequences) {
    if (!sc.sample) continue;
    if (sc.state->sampling.num_logprobs < 0) {
      device_params_.push_back(ParamsOf(*sc.state));  // validated by StateCache
      device_slots_.push_back(k);
    }
    ++k;
  }
  if (device_params_.empty()) return true;  // every entry wants logprobs: host
  size_t d = 0;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const ScheduledSequence& sc = batch.sequences[i];
    if (!sc.sample || sc.state->sampling.num_logprobs >= 0) continue;
    const auto tokens = absl::MakeConstSpan(sc.state->tokens);
    Backend::SampleRequest r;
    r.row = RowOf(sc, i);
    r.params = &device_params_[d++];
    r.prompt = tokens.subspan(0, sc.state->num_prompt_tokens);
    r.output = tokens.subspan(sc.state->num_prompt_tokens);
    r.allowed_tokens = sc.allowed_tokens;
    device_requests_.push_back(r);
  }
  const absl::Status s = backend.SampleOnDevice(device_requests_, &device_tokens_);
  if (absl::IsUnimplemented(s)) return false;
  WEFT_RETURN_IF_ERROR(s);
  if (device_tokens_.size() != device_slots_.size()) {
    return absl::InternalError("the device sampled a different number of rows");
  }
  for (size_t j = 0; j < device_slots_.size(); ++j) {
    if (device_tokens_[j] < 0) return absl::InvalidArgumentError("no token has a finite logit");
    out->samples[device_slots_[j]].token = device_tokens_[j];
  }
  return true;
}

}  // namespace weft

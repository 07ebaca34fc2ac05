#include "scheduler/sequence.h"

#include <algorithm>

namespace weft {

absl::string_view SequenceStateName(SequenceState state) {
  switch (state) {
    case SequenceState::kWaiting:
      return "waiting";
    case SequenceState::kRunning:
      return "running";
    case SequenceState::kPreempted:
      return "preempted";
    case SequenceState::kFinished:
      return "finished";
  }
  return "unknown";
}

int32_t Sequence::num_prompt_tokens() const { return request->num_prompt_tokens; }

SequenceRef Sequence::ref() const { return SequenceRef{request->id, sample_index}; }

SeqKey Sequence::key() const {
  return SeqKey{-request->priority, request->arrival, request->id.value(), sample_index};
}

bool Request::Quiescent() const {
  if (num_unfinished > 0) return false;
  for (const auto& s : seqs) {
    if (s->num_pending_samples > 0) return false;
  }
  return true;
}

FinishReason AppendTokenAndCheckStop(Sequence* seq, int32_t token, const StopContext& ctx,
                                     std::string* delta) {
  seq->token_ids.push_back(token);
  const StoppingParams& stop = seq->request->stopping;
  if (!stop.ignore_eos &&
      std::find(ctx.eos_token_ids.begin(), ctx.eos_token_ids.end(), token) !=
          ctx.eos_token_ids.end()) {
    return FinishReason::kStopEos;
  }
  if (std::find(stop.stop_token_ids.begin(), stop.stop_token_ids.end(), token) !=
      stop.stop_token_ids.end()) {
    return FinishReason::kStopToken;
  }
  if (ctx.text != nullptr && seq->stop_checker.Append(ctx.text->TokenBytes(token), delta)) {
    return FinishReason::kStopString;
  }
  if (seq->num_output_tokens() >= stop.max_tokens) return FinishReason::kLength;
  return FinishReason::kNone;
}

}  // namespace weft

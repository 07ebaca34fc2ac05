#include "scheduler/sequence.h"

#include <algorithm>

namespace weft {

Sequence::Sequence(Request* request, int32_t sample_index, const std::vector<std::string>* stops)
    : request(request),
      sample_index(sample_index),
      request_id(request->id),
      prompt_len(request->num_prompt_tokens),
      max_tokens(request->stopping.max_tokens),
      stop_checker(stops) {}

SeqKey Sequence::key() const {
  return SeqKey{-int64_t{request->priority}, request->arrival, request->id.value(), sample_index};
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
  const StopConditions& stop = seq->request->stopping;
  if (!stop.ignore_eos &&
      std::find(ctx.eos_token_ids.begin(), ctx.eos_token_ids.end(), token) !=
          ctx.eos_token_ids.end()) {
    return FinishReason::kStopEos;
  }
  if (std::find(stop.stop_token_ids.begin(), stop.stop_token_ids.end(), token) !=
      stop.stop_token_ids.end()) {
    return FinishReason::kStopToken;
  }
  if (ctx.text != nullptr) {
    const absl::string_view bytes = seq->request->tool_call_text ? ctx.text->ToolCallBytes(token)
                                                                 : ctx.text->TokenBytes(token);
    if (seq->stop_checker.Append(bytes, delta)) return FinishReason::kStopString;
  }
  if (seq->num_output_tokens() >= seq->max_tokens) return FinishReason::kLength;
  return FinishReason::kNone;
}

}  // namespace weft

#include "scheduler/types.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace weft {

absl::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStopEos:
      return "stop_eos";
    case FinishReason::kStopToken:
      return "stop_token";
    case FinishReason::kStopString:
      return "stop_string";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kDeadline:
      return "deadline";
    case FinishReason::kUnavailable:
      return "unavailable";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

absl::string_view FinishReasonApiName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStopEos:
    case FinishReason::kStopToken:
    case FinishReason::kStopString:
      return "stop";
    default:
      return FinishReasonName(reason);
  }
}

absl::Status SamplingParams::Validate() const {
  if (!std::isfinite(temperature) || temperature < 0) {
    return absl::InvalidArgumentError(absl::StrCat("temperature must be finite and >= 0, got ",
                                                   temperature));
  }
  if (!(top_p > 0 && top_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", top_p));
  }
  if (top_k < 0) {
    return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", top_k));
  }
  if (!(min_p >= 0 && min_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("min_p must be in [0, 1], got ", min_p));
  }
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0) {
    return absl::InvalidArgumentError("repetition_penalty must be finite and > 0");
  }
  if (!(presence_penalty >= -2 && presence_penalty <= 2)) {
    return absl::InvalidArgumentError("presence_penalty must be in [-2, 2]");
  }
  if (!(frequency_penalty >= -2 && frequency_penalty <= 2)) {
    return absl::InvalidArgumentError("frequency_penalty must be in [-2, 2]");
  }
  if (logprobs < -1) return absl::InvalidArgumentError("logprobs must be >= -1 (-1 = none)");
  return absl::OkStatus();
}

}  // namespace weft

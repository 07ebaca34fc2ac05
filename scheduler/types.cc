#include "scheduler/types.h"

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

}  // namespace weft

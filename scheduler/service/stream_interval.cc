#include "scheduler/service/stream_interval.h"

namespace weft {

absl::Status StreamIntervalOptions::Validate() const {
  if (tokens < 1) return absl::InvalidArgumentError("stream interval must be >= 1 token");
  if (min_streams < 1) {
    return absl::InvalidArgumentError("stream interval min streams must be >= 1");
  }
  if (max_hold < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("stream interval max hold must be >= 0");
  }
  return absl::OkStatus();
}

}  // namespace weft

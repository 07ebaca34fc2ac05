#include "common/sampling/sampling_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace weft {
namespace {

bool InRange(float x, float lo, float hi) { return x >= lo && x <= hi; }  // false for NaN

}  // namespace

std::optional<SamplingConfig::Problem> SamplingConfig::Check() const {
  if (!std::isfinite(temperature) || temperature < 0) {
    return Problem{"temperature", "must be a finite number >= 0"};
  }
  if (top_k < 0) return Problem{"top_k", "must be >= 0 (0 = off)"};
  if (!(top_p > 0 && top_p <= 1)) return Problem{"top_p", "must be in (0, 1]"};
  if (!InRange(min_p, 0, 1)) return Problem{"min_p", "must be in [0, 1]"};
  if (!(repetition_penalty > 0 && repetition_penalty <= 10)) {
    return Problem{"repetition_penalty", "must be in (0, 10]"};
  }
  if (!InRange(presence_penalty, -2, 2)) return Problem{"presence_penalty", "must be in [-2, 2]"};
  if (!InRange(frequency_penalty, -2, 2)) {
    return Problem{"frequency_penalty", "must be in [-2, 2]"};
  }
  if (num_logprobs < -1) return Problem{"num_logprobs", "must be >= -1 (-1 = none)"};
  return std::nullopt;
}

absl::Status SamplingConfig::Validate() const {
  const std::optional<Problem> p = Check();
  if (!p) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(p->field, ": ", p->reason));
}

}  // namespace weft

#include "common/plan/sampling_params.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace weft {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

bool InRange(float x, float lo, float hi) { return x >= lo && x <= hi; }  // false for NaN

}  // namespace

absl::Status SamplingParams::Validate() const {
  if (!std::isfinite(temperature) || temperature < 0) {
    return Invalid("temperature", "must be a finite number >= 0");
  }
  if (top_k < 0) return Invalid("top_k", "must be >= 0 (0 = off)");
  if (!(top_p > 0 && top_p <= 1)) return Invalid("top_p", "must be in (0, 1]");
  if (!InRange(min_p, 0, 1)) return Invalid("min_p", "must be in [0, 1]");
  if (!(repetition_penalty > 0 && repetition_penalty <= 10)) {
    return Invalid("repetition_penalty", "must be in (0, 10]");
  }
  if (!InRange(presence_penalty, -2, 2)) return Invalid("presence_penalty", "must be in [-2, 2]");
  if (!InRange(frequency_penalty, -2, 2)) {
    return Invalid("frequency_penalty", "must be in [-2, 2]");
  }
  if (num_logprobs < -1) return Invalid("num_logprobs", "must be >= -1 (-1 = none)");
  return absl::OkStatus();
}

void ToSpec(const SamplingParams& p, int32_t sample_index, weft::v1::SamplingSpec* out) {
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

SamplingParams FromSpec(const weft::v1::SamplingSpec& s) {
  SamplingParams p;
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

// SamplingConfig: how one request's tokens are drawn — the one shape of these settings
// on both sides of the wire. The edge resolves the public API's weft.v1.SamplingParams
// into it, the scheduler core carries it per request, the plan carries it per new
// sequence (weft.v1.SamplingSpec, common/plan/sampling_spec.h) and the Sampler
// (sampler.h) reads it. Check() is the one rule for what is allowed; it names the
// failing field as data, so that each caller says it in its own terms (the request
// contract: "sampling.<field>"; a worker applying a plan: the plan's sequence).
//
// Defaults follow DESIGN.md's "request defaults" contract: every one is a no-op.
// Thread-safety: a value type.
#ifndef WEFT_COMMON_SAMPLING_SAMPLING_CONFIG_H_
#define WEFT_COMMON_SAMPLING_SAMPLING_CONFIG_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace weft {

struct SamplingConfig {
  float temperature = 1.0f;         // finite, >= 0; 0 = greedy
  int32_t top_k = 0;                // >= 0; 0 = off
  float top_p = 1.0f;               // (0, 1]; 1 = off
  float min_p = 0.0f;               // [0, 1]; 0 = off
  float repetition_penalty = 1.0f;  // (0, 10]; 1 = off
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  uint64_t seed = 0;                // Philox key; the edge draws one when the client
                                    // gives none
  int32_t num_logprobs = -1;        // -1: none; k >= 0: the chosen token's and the top k

  // The first field out of range: its name ("top_p") and why ("must be in (0, 1]").
  struct Problem {
    absl::string_view field;
    absl::string_view reason;
  };
  std::optional<Problem> Check() const;
  // Whether the history changes the logits (repetition, presence or frequency penalty).
  bool has_penalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
  // Check() as a status: INVALID_ARGUMENT "<field>: <reason>".
  absl::Status Validate() const;
};

}  // namespace weft

#endif  // WEFT_COMMON_SAMPLING_SAMPLING_CONFIG_H_

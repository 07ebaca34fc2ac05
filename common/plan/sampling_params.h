// SamplingParams: how one request's tokens are drawn — the one shape of these settings
// on both sides of the wire. The public API (generate.proto) resolves into it, the
// scheduler core carries it per request, the plan carries it per new sequence
// (weft.v1.SamplingSpec, through ToSpec/FromSpec), and the worker's sampler reads it.
// Validate() is the one rule for what is allowed; the API names the failing field in
// its message ("sampling." + the message here).
//
// Defaults follow DESIGN.md's "request defaults" contract: every one is a no-op.
// Thread-safety: a value type.
#ifndef WEFT_COMMON_PLAN_SAMPLING_PARAMS_H_
#define WEFT_COMMON_PLAN_SAMPLING_PARAMS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "weft/v1/worker.pb.h"

namespace weft {

struct SamplingParams {
  float temperature = 1.0f;         // finite, >= 0; 0 = greedy
  int32_t top_k = 0;                // >= 0; 0 = off
  float top_p = 1.0f;               // (0, 1]; 1 = off
  float min_p = 0.0f;               // [0, 1]; 0 = off
  float repetition_penalty = 1.0f;  // (0, 10]; 1 = off
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  uint64_t seed = 0;                // Philox key; the services layer draws one when
                                    // the client gives none
  int32_t num_logprobs = -1;        // -1: none; k >= 0: the chosen token's and the top k

  // INVALID_ARGUMENT naming the first field out of range ("top_p: must be in (0, 1]").
  absl::Status Validate() const;
};

// The plan's encoding. `sample_index` is the sequence's sample of its request (the
// Philox counter word 0); the wire carries it beside the request's settings.
void ToSpec(const SamplingParams& params, int32_t sample_index, weft::v1::SamplingSpec* out);
SamplingParams FromSpec(const weft::v1::SamplingSpec& spec);

}  // namespace weft

#endif  // WEFT_COMMON_PLAN_SAMPLING_PARAMS_H_

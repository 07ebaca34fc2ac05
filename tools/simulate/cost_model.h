// CostModel: how long a worker takes for one step, as a function of the plan:
//
//   step time = a + b · max(0, tokens − knee) + c · context
//
// tokens  = tokens scheduled in the step (prefill chunks + decodes),
// context = Σ over scheduled sequences of the positions their attention reads
//           (num_computed_tokens + num_scheduled_tokens).
// The knee makes it GPU-like: below it a step is bound by reading the weights and costs
// the same at any batch size; above it every token adds compute. knee = 0 gives a
// CPU-like model where cost grows with every token.
//
// Presets (order-of-magnitude figures, not measurements):
//   "gpu"     an 8B-class GQA model in 16-bit on one H100-class GPU: a = 10 ms (read
//             16 GB of weights at ~2 TB/s, plus launch overhead), flat up to a knee of
//             512 tokens, then b = 0.03 ms per token (16 GFLOP/token at ~500 TFLOP/s
//             sustained), c = 0.05 µs per context token (128 KB of KV per token);
//   "gpu-mha" a 7B model without GQA: a = 15 ms, b = 0.06 ms, c = 0.2 µs per context
//             token (512 KB of KV per token: attention weighs 4x more);
//   "cpu"     every token costs: a = 2 ms, b = 0.25 ms per token, no knee.
// Thread-safety: value type.
#ifndef WEFT_TOOLS_SIMULATE_COST_MODEL_H_
#define WEFT_TOOLS_SIMULATE_COST_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/plan/step_plan.h"

namespace weft::sim {

struct CostModel {
  double step_ms = 10;                    // a
  double ms_per_token = 0.03;             // b, above the knee
  double ms_per_context_token = 0.00005;  // c
  int32_t knee_tokens = 512;

  absl::Status Validate() const;
  // Seconds the step described by `plan` takes.
  double StepSeconds(const StepPlan& plan) const;
  std::string Describe() const;
};

// "gpu", "gpu-mha" or "cpu".
absl::StatusOr<CostModel> CostModelPreset(absl::string_view name);

}  // namespace weft::sim

#endif  // WEFT_TOOLS_SIMULATE_COST_MODEL_H_

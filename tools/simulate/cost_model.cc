#include "tools/simulate/cost_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace weft::sim {

absl::Status CostModel::Validate() const {
  if (!(step_ms >= 0) || !(ms_per_token >= 0) || !(ms_per_context_token >= 0) ||
      knee_tokens < 0) {
    return absl::InvalidArgumentError("cost model terms must be >= 0");
  }
  if (step_ms == 0 && ms_per_token == 0 && ms_per_context_token == 0) {
    return absl::InvalidArgumentError("a cost model must cost something");
  }
  return absl::OkStatus();
}

double CostModel::StepSeconds(const StepPlan& plan) const {
  int64_t context = 0;
  for (const auto& e : plan.new_sequences()) {
    context += e.num_computed_tokens() + e.num_scheduled_tokens();
  }
  for (const auto& e : plan.cached_sequences()) {
    context += e.num_computed_tokens() + e.num_scheduled_tokens();
  }
  const int64_t over_knee = std::max<int64_t>(0, plan.num_scheduled_tokens() - knee_tokens);
  const double ms = step_ms + ms_per_token * static_cast<double>(over_knee) +
                    ms_per_context_token * static_cast<double>(context);
  return ms / 1000.0;
}

std::string CostModel::Describe() const {
  return absl::StrFormat("step = %g ms + %g ms x max(0, tokens - %d) + %g ms x context", step_ms,
                         ms_per_token, knee_tokens, ms_per_context_token);
}

absl::StatusOr<CostModel> CostModelPreset(absl::string_view name) {
  CostModel m;
  if (name == "gpu") return m;
  if (name == "gpu-mha") {
    m.step_ms = 15;
    m.ms_per_token = 0.06;
    m.ms_per_context_token = 0.0002;
    return m;
  }
  if (name == "cpu") {
    m.step_ms = 2;
    m.ms_per_token = 0.25;
    m.ms_per_context_token = 0.0005;
    m.knee_tokens = 0;
    return m;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown cost model '", name, "' (gpu, gpu-mha or cpu)"));
}

}  // namespace weft::sim

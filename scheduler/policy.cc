#include "scheduler/policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace weft {
namespace {

class DecodeFirstPolicy final : public SchedulingPolicy {
 public:
  PolicyKind kind() const override { return PolicyKind::kDecodeFirst; }
  absl::Span<const PlanPass> passes() const override {
    static constexpr PlanPass kPasses[] = {PlanPass::kRunningDecodes, PlanPass::kRunningPrefills,
                                           PlanPass::kWaiting};
    return kPasses;
  }
  bool MayAdmit(int32_t) const override { return true; }
  bool AdmitsWithoutBudget() const override { return false; }
  int32_t TokensToHold(int32_t num_computed_after_step, int32_t) const override {
    return num_computed_after_step;
  }
};

class PrefillFirstPolicy final : public SchedulingPolicy {
 public:
  PolicyKind kind() const override { return PolicyKind::kPrefillFirst; }
  absl::Span<const PlanPass> passes() const override {
    static constexpr PlanPass kPasses[] = {PlanPass::kRunningPrefills, PlanPass::kWaiting,
                                           PlanPass::kRunningDecodes};
    return kPasses;
  }
  bool MayAdmit(int32_t) const override { return true; }
  bool AdmitsWithoutBudget() const override { return false; }
  int32_t TokensToHold(int32_t num_computed_after_step, int32_t) const override {
    return num_computed_after_step;
  }
};

class StaticPolicy final : public SchedulingPolicy {
 public:
  PolicyKind kind() const override { return PolicyKind::kStatic; }
  absl::Span<const PlanPass> passes() const override {
    static constexpr PlanPass kPasses[] = {PlanPass::kRunningPrefills, PlanPass::kRunningDecodes,
                                           PlanPass::kWaiting};
    return kPasses;
  }
  bool MayAdmit(int32_t num_running) const override { return num_running == 0; }
  bool AdmitsWithoutBudget() const override { return true; }
  int32_t TokensToHold(int32_t num_computed_after_step, int32_t max_total_tokens) const override {
    return std::max(num_computed_after_step, max_total_tokens);
  }
};

}  // namespace

absl::string_view PolicyKindName(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kDecodeFirst:
      return "decode-first";
    case PolicyKind::kPrefillFirst:
      return "prefill-first";
    case PolicyKind::kStatic:
      return "static";
  }
  return "unknown";
}

absl::StatusOr<PolicyKind> ParsePolicyKind(absl::string_view name) {
  for (PolicyKind k : {PolicyKind::kDecodeFirst, PolicyKind::kPrefillFirst, PolicyKind::kStatic}) {
    if (name == PolicyKindName(k)) return k;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown policy '", name, "' (decode-first, prefill-first or static)"));
}

std::unique_ptr<SchedulingPolicy> MakePolicy(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kDecodeFirst:
      return std::make_unique<DecodeFirstPolicy>();
    case PolicyKind::kPrefillFirst:
      return std::make_unique<PrefillFirstPolicy>();
    case PolicyKind::kStatic:
      return std::make_unique<StaticPolicy>();
  }
  return nullptr;
}

}  // namespace weft

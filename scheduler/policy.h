// Scheduling policies: small, const objects (TensorRT-LLM style) that answer the
// planner's few policy questions — in which order an iteration's passes fill the token
// budget, when waiting sequences may be admitted, and how many tokens' worth of blocks
// an admitted sequence holds. Everything else (ordering within a pass, preemption,
// chunking) is the planner's and common to all policies.
//
//   decode-first  (default): running decodes get their next token first, then running
//                 chunked prefills, then new admissions fill what is left. Blocks are
//                 allocated on demand.
//   prefill-first: running prefills and new admissions first (lowest TTFT), decodes
//                 take what is left (TGI / vLLM v0 behaviour; inter-token latency
//                 suffers while prompts arrive).
//   static:       classic static batching, the benchmarks' baseline: a batch is
//                 admitted only when the previous one has fully finished, every member
//                 reserves blocks for prompt + max_tokens up front (so it is never
//                 preempted), and admission is bounded by blocks and max_num_seqs, not
//                 by the token budget (members whose prefill does not fit this
//                 iteration start in later ones).
//
// Thread-safety: immutable after construction; safe to share.
#ifndef WEFT_SCHEDULER_POLICY_H_
#define WEFT_SCHEDULER_POLICY_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace weft {

enum class PolicyKind { kDecodeFirst, kPrefillFirst, kStatic };

absl::string_view PolicyKindName(PolicyKind kind);  // "decode-first", ...
absl::StatusOr<PolicyKind> ParsePolicyKind(absl::string_view name);

// One pass over a class of sequences, filling the remaining budget in queue order.
enum class PlanPass {
  kRunningDecodes,   // running sequences with one token to compute
  kRunningPrefills,  // running sequences with more (chunked prefill / recompute)
  kWaiting,          // admissions from the waiting queue
};

class SchedulingPolicy {
 public:
  virtual ~SchedulingPolicy() = default;

  virtual PolicyKind kind() const = 0;
  // The passes of one iteration, in order.
  virtual absl::Span<const PlanPass> passes() const = 0;
  // May waiting sequences be admitted while `num_running` sequences run?
  virtual bool MayAdmit(int32_t num_running) const = 0;
  // May a sequence be admitted with zero tokens scheduled (the budget is spent)?
  virtual bool AdmitsWithoutBudget() const = 0;
  // Tokens whose blocks a sequence holds once admitted, given the tokens it will have
  // computed after this iteration and its maximum total length (prompt + max_tokens).
  virtual int32_t TokensToHold(int32_t num_computed_after_step,
                               int32_t max_total_tokens) const = 0;
};

std::unique_ptr<SchedulingPolicy> MakePolicy(PolicyKind kind);

}  // namespace weft

#endif  // WEFT_SCHEDULER_POLICY_H_

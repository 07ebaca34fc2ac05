// The request contract of the scheduler core: what a client asks for (RequestSpec), the
// limits every request is held to (RequestLimits, defined once: the scheduler's options
// hold them and the edge builds requests against the same object), and the one
// validator, ValidateRequest, which turns a spec into a ValidRequest — the only thing
// Scheduler::AddRequest takes, so a request is validated exactly once, before it queues.
//
// The edges (scheduler/edge: gRPC Generate, the OpenAI HTTP API) build the spec from
// their wire format — defaults (DESIGN.md "request defaults": unset sampling fields keep
// SamplingConfig's no-op defaults, max_tokens = RequestLimits::DefaultMaxTokens), the
// tokenized prompt, a seed when the client gives none — and call ValidateRequest. A
// refusal is INVALID_ARGUMENT carrying the failing field as data (common/field_error.h,
// schema kRequestFieldSchema; the field is its generate.proto path: "sampling.top_p",
// "stopping.max_tokens", "n", "logprobs", "prompt", ...), which each edge maps to its
// own terms without reading the message.
// Thread-safety: value types and pure functions.
#ifndef WEFT_SCHEDULER_REQUEST_SPEC_H_
#define WEFT_SCHEDULER_REQUEST_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/sampling/sampling_config.h"
#include "scheduler/grammar/constraint.h"

namespace weft {

// When a sequence stops, besides its request's deadline (the scheduler decides; workers
// never stop a sequence).
struct StopConditions {
  int32_t max_tokens = 16;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  // Matched on the output text across token boundaries; the matched string is not part
  // of the returned text. Valid, non-empty UTF-8.
  std::vector<std::string> stop_strings;
};

// What a client asks for.
struct RequestSpec {
  std::vector<int32_t> prompt_token_ids;
  SamplingConfig sampling;  // seed set by the edge when the client gives none
  StopConditions stopping;
  int32_t n = 1;            // independent samples; each is its own sequence
  int32_t priority = 0;     // higher is served first; ties FCFS
  absl::Time deadline = absl::InfiniteFuture();
  // Structured output (scheduler/grammar/constraint.h); unset: free text.
  std::optional<GrammarConstraint> constraint;
};

struct RequestLimits {
  int32_t vocab_size = 0;       // logits width: every token id must be below it (> 0)
  int32_t max_model_len = 8192; // prompt + max_tokens must fit
  int32_t max_tokens = 4096;    // the server's cap on max_tokens
  int32_t max_n = 16;           // at most SchedulerOptions::max_num_seqs (checked there)
  int32_t max_logprobs = 20;
  int32_t max_stop_strings = 16;
  int32_t max_stop_string_bytes = 256;
  int32_t max_stop_token_ids = 64;
  ConstraintLimits constraint;

  // max_tokens of a request that gives none: min(cap, context - prompt).
  int32_t DefaultMaxTokens(int32_t num_prompt_tokens) const;
  absl::Status Validate() const;
};

// The schema of the field paths in ValidateRequest's errors (common/field_error.h).
inline constexpr char kRequestFieldSchema[] = "weft.v1.GenerateRequest";

// A RequestSpec that passed ValidateRequest; only ValidateRequest makes one.
class ValidRequest {
 public:
  const RequestSpec& spec() const { return spec_; }

 private:
  friend absl::StatusOr<ValidRequest> ValidateRequest(RequestSpec spec,
                                                      const RequestLimits& limits);
  explicit ValidRequest(RequestSpec spec) : spec_(std::move(spec)) {}

  RequestSpec spec_;
};

// The one rule for a request: a non-empty prompt of token ids below the vocabulary that
// leaves room for one token; sampling settings SamplingConfig::Check accepts; logprobs in
// [-1, max_logprobs]; max_tokens in [1, cap] with prompt + max_tokens within the context;
// n in [1, max_n]; at most max_stop_strings non-empty valid UTF-8 stop strings of at most
// max_stop_string_bytes; at most max_stop_token_ids stop token ids below the vocabulary;
// a constraint within CheckConstraint's limits (field "constraint.<kind>"; whether it
// compiles is the grammar engine's to say, after validation).
// Otherwise INVALID_ARGUMENT naming the first field that fails (see the top).
absl::StatusOr<ValidRequest> ValidateRequest(RequestSpec spec, const RequestLimits& limits);

}  // namespace weft

#endif  // WEFT_SCHEDULER_REQUEST_SPEC_H_

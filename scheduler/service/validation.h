// Request validation: turns a public GenerateRequest into a ResolvedRequest, or the
// exact gRPC-mappable status that ../RELIABILITY.md lists for bad input. Runs once in
// the scheduler, before anything is queued or any KV block is allocated.
//
// Defaults (DESIGN.md "request defaults"): temperature 1, top_p 1, top_k 0 (off),
// min_p 0, penalties off, n 1, max_tokens = min(server cap, context - prompt). An
// explicit out-of-range value is INVALID_ARGUMENT; the message names the field.
// Thread-safety: pure functions; the PromptEncoder must be safe to call concurrently if
// validation runs on several threads.
#ifndef WEFT_SCHEDULER_SERVICE_VALIDATION_H_
#define WEFT_SCHEDULER_SERVICE_VALIDATION_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/plan/sampling_params.h"
#include "weft/v1/generate.pb.h"

namespace weft {

struct ValidationLimits {
  std::string model_name;       // the served model's name
  int32_t vocab_size = 0;       // logits width: every token id must be below it
  int32_t context_length = 0;   // prompt + max_tokens must fit
  int32_t max_tokens_cap = 4096;
  int32_t max_n = 16;
  int32_t max_logprobs = 20;
  int32_t max_stop_strings = 16;
  int32_t max_stop_string_bytes = 256;
  int32_t max_stop_token_ids = 64;
  int32_t max_prompt_bytes = 1 << 20;

  absl::Status Validate() const;
};

struct ResolvedRequest {
  std::vector<int32_t> prompt_token_ids;
  SamplingParams sampling;  // defaults applied, validated, seed chosen
  int32_t max_tokens = 0;
  std::vector<std::string> stop_strings;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int32_t n = 1;
  int32_t priority = 0;
  std::string client_request_id;
};

// Turns a text or chat prompt into token ids. Chat for a model without a supported
// template returns UNIMPLEMENTED; other failures INVALID_ARGUMENT.
class PromptEncoder {
 public:
  virtual ~PromptEncoder() = default;
  virtual absl::StatusOr<std::vector<int32_t>> EncodeText(const std::string& text) const = 0;
  virtual absl::StatusOr<std::vector<int32_t>> EncodeChat(
      const weft::v1::ChatPrompt& chat) const = 0;
};

// The metadata (HTTP header) a caller may name the model in, so that a proxy can route
// by it without parsing the request body.
inline constexpr char kModelMetadataKey[] = "x-weft-model";

// Which model a call asks for: the request's `model` field and/or the x-weft-model
// metadata (`header`, "" when absent). Both given and different: INVALID_ARGUMENT. The
// one given (they agree) must be `served`: else NOT_FOUND. Neither: the only model, OK.
// Every public endpoint (gRPC, HTTP) calls this before anything else about the request.
absl::Status CheckRequestedModel(absl::string_view field, absl::string_view header,
                                 absl::string_view served);

// `seed_source` gives the seed for requests without one (called at most once).
// The request's `model` field is checked as CheckRequestedModel(model, "", name) does.
absl::StatusOr<ResolvedRequest> ValidateRequest(const weft::v1::GenerateRequest& request,
                                                const ValidationLimits& limits,
                                                const PromptEncoder& encoder,
                                                const std::function<uint64_t()>& seed_source);

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_VALIDATION_H_

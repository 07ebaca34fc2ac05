// The edge's half of the request contract (scheduler/request_spec.h): turns a public
// weft.v1.GenerateRequest — a gRPC Generate call's, or an OpenAI body openai_json.h
// mapped — into the core's RequestSpec, which the caller (GenerateFrontend) then gives to
// the core's one validator, ValidateRequest: once per call, before anything is queued or
// any KV block is allocated.
//
// What the edge itself does: the prompt (text or chat through the PromptEncoder, at most
// max_prompt_bytes of it; or token ids as given), the defaults of DESIGN.md's "request
// defaults" (proto3 `optional` fields left unset keep SamplingConfig's no-op defaults, n 1,
// max_tokens RequestLimits::DefaultMaxTokens) and a seed from `seed_source` when the
// client gives none. Every refusal of a field carries the field as data
// (common/field_error.h, schema kRequestFieldSchema, generate.proto paths), whether the
// edge or the core found it.
// Thread-safety: pure functions; the PromptEncoder must be safe to call concurrently.
#ifndef WEFT_SCHEDULER_EDGE_GENERATE_REQUEST_H_
#define WEFT_SCHEDULER_EDGE_GENERATE_REQUEST_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tool_call_format.h"
#include "scheduler/request_spec.h"
#include "weft/v1/generate.pb.h"

namespace weft {

// Turns a text or chat prompt into token ids. Chat for a model without a supported
// template returns UNIMPLEMENTED; other failures INVALID_ARGUMENT.
class PromptEncoder {
 public:
  virtual ~PromptEncoder() = default;
  virtual absl::StatusOr<std::vector<int32_t>> EncodeText(const std::string& text) const = 0;
  virtual absl::StatusOr<std::vector<int32_t>> EncodeChat(
      const weft::v1::ChatPrompt& chat) const = 0;
  // The form the model writes tool calls in (its chat template's, common/tool_call_format.h).
  virtual ToolCallFormat tool_call_format() const { return ToolCallFormat::kHermes; }
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

// Whether the answer is read for tool calls: a chat prompt whose tool_choice is AUTO,
// REQUIRED or a function. BuildSpec then holds the calls with a structural tag in the
// encoder's tool_call_format() (common/tool_call_format.h), built here, once, for both
// APIs; the APIs read the answer with tool_call_parser.h in the same format.
bool ReadsToolCalls(const weft::v1::GenerateRequest& request);

// The request's spec (see the top), not yet validated; errors are the prompt's.
// `seed_source` is called at most once.
absl::StatusOr<RequestSpec> BuildSpec(const weft::v1::GenerateRequest& request,
                                      const RequestLimits& limits, size_t max_prompt_bytes,
                                      const PromptEncoder& encoder,
                                      const std::function<uint64_t()>& seed_source);

}  // namespace weft

#endif  // WEFT_SCHEDULER_EDGE_GENERATE_REQUEST_H_

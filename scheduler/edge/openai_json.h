// OpenAI-compatible JSON for weft-scheduler's HTTP API (http_server.h): request bodies
// of /v1/completions and /v1/chat/completions become a weft::v1::GenerateRequest — which
// then goes through the same GenerateFrontend and validator as a gRPC call — and the
// engine's GenerateResponses become OpenAI responses or stream chunks. Errors of every
// origin (this parser, the validator, the engine) become one OpenAI error shape with its
// HTTP status here, in one place.
//
// Field mapping (README "OpenAI-compatible HTTP API" has the table):
//   max_tokens (completions default 16, as OpenAI and vLLM) | chat: max_completion_tokens
//   or max_tokens (default: the context) -> stopping.max_tokens; temperature, top_p,
//   top_k (-1 = off, as vLLM), min_p, repetition/presence/frequency_penalty, seed ->
//   sampling; stop (string or list), stop_token_ids, ignore_eos -> stopping; n -> n;
//   completions logprobs (int) | chat logprobs (bool) + top_logprobs -> logprobs.
// Unknown fields are ignored, as vLLM does (clients send fields newer than this
// server); fields Weft knows but cannot honour with the value given (echo, best_of > n,
// suffix, logit_bias, functions, guided decoding, ...) are rejected with 400 naming the
// field, never silently ignored; response_format maps to structured output
// (openai_structured.h), tools / tool_choice to tool calling (openai_tools.h): the answer
// is then read for calls (tool_call_parser.h) and given as message.tool_calls with
// finish_reason "tool_calls" (content null when only calls), streamed as delta.tool_calls
// (a call's index, id, type and name first, then its arguments in fragments).
//
// Thread-safety: pure functions; a ResponseBuilder belongs to one call.
#ifndef WEFT_SCHEDULER_SERVICE_OPENAI_JSON_H_
#define WEFT_SCHEDULER_SERVICE_OPENAI_JSON_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tool_call_format.h"
#include "weft/v1/generate.pb.h"

namespace weft::openai {

enum class Api { kCompletions, kChatCompletions };

struct ParsedRequest {
  Api api = Api::kCompletions;
  weft::v1::GenerateRequest request;
  bool stream = false;
  // stream_options.include_usage: a last chunk with "choices": [] carries usage.
  bool include_usage = false;
  // The answer carries logprobs (completions: "logprobs" given; chat: logprobs: true).
  bool logprobs = false;
  // The body's name for stopping.max_tokens, for error messages.
  std::string max_tokens_field = "max_tokens";
  // The answer is read for tool calls (tools with tool_choice other than "none").
  bool parse_tool_calls = false;
};

// The schema of the body's field paths in ParseRequest's errors (common/field_error.h).
inline constexpr char kBodyFieldSchema[] = "openai.body";

// Maps a request body. Errors are INVALID_ARGUMENT naming the JSON field as data
// (kBodyFieldSchema; ErrorFor makes it "param"), but for a body that is no JSON object.
absl::StatusOr<ParsedRequest> ParseRequest(Api api, absl::string_view body);

// An error as a client sees it: the HTTP status and the fields of
// {"error": {"message", "type", "param", "code"}} (empty param/code are null).
struct ApiError {
  int http_status = 500;
  std::string message;
  std::string type;
  std::string param;
  std::string code;
};

// HTTP status for a status code: INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE and
// UNIMPLEMENTED (chat for a model without a ChatML template: retrying cannot help, and
// OpenAI clients retry 5xx) 400; UNAUTHENTICATED 401; PERMISSION_DENIED 403; NOT_FOUND
// 404; ALREADY_EXISTS, ABORTED 409; RESOURCE_EXHAUSTED 429; CANCELLED 499; UNAVAILABLE
// 503; DEADLINE_EXCEEDED 504; anything else 500.
int HttpStatusFor(absl::StatusCode code);

// The error for `status` (not OK). "type": invalid_request_error for 4xx but 429
// (rate_limit_error), server_error for 5xx; "code": model_not_found for an unknown model,
// invalid_api_key for UNAUTHENTICATED, else the status code's name in lower case
// ("invalid_argument", "resource_exhausted", "unavailable", ...); "param": the JSON field
// an error carries as data (common/field_error.h: the parser's own, or the request
// contract's generate.proto field said in the body's terms, which the message then names
// too). `request` (may be null) gives the API and the field names used.
ApiError ErrorFor(const absl::Status& status, const ParsedRequest* request = nullptr);
// An error that did not come from a status (e.g. an unknown path): the type and code
// follow from `http_status` as above.
ApiError ErrorForHttp(int http_status, std::string message);
std::string ErrorBody(const ApiError& error);

// Raw bytes of a token id (the tokenizer's text; may be part of a UTF-8 character).
using TokenBytesFn = std::function<std::string(int32_t token_id)>;

struct ResponseOptions {
  Api api = Api::kCompletions;
  std::string model;    // the served model's name, echoed in "model"
  int64_t created = 0;  // Unix seconds of the request's arrival
  bool include_usage = false;
  bool logprobs = false;
  bool parse_tool_calls = false;  // ParsedRequest::parse_tool_calls (chat only)
  // The served model's tool-call format (GenerateFrontend::tool_call_format).
  ToolCallFormat tool_format = ToolCallFormat::kHermes;
  TokenBytesFn token_bytes;
};

// Turns one call's engine responses into OpenAI JSON. Ids are "cmpl-<request id>" and
// "chatcmpl-<request id>" (the engine's request id, also in the scheduler's logs).
// Strings that are not valid UTF-8 (a token that is part of a character) are written
// with U+FFFD in their place; chat logprobs also give the exact "bytes".
class ResponseBuilder {
 public:
  explicit ResponseBuilder(ResponseOptions options);
  ~ResponseBuilder();

  // Streaming: the "data" of the server-sent events for one engine response, in order
  // (none when it has nothing to show): one chunk for its choice and, on the stream's
  // last response with include_usage, the usage chunk ("choices": []).
  std::vector<std::string> StreamEvents(const weft::v1::GenerateResponse& response);

  // Non-streaming: records one engine response; Body() once the call ended OK.
  void Add(const weft::v1::GenerateResponse& response);
  std::string Body() const;

 private:
  struct Choice;
  struct Usage;
  Choice& ChoiceAt(int32_t index);
  void NoteIdAndUsage(const weft::v1::GenerateResponse& response);

  const ResponseOptions options_;
  std::string id_;
  std::string request_id_;
  std::map<int32_t, std::unique_ptr<Choice>> choices_;
  std::unique_ptr<Usage> usage_;
};

// GET /v1/models and /v1/models/{id}. `created`: Unix seconds (the server's start).
std::string ModelListBody(const weft::v1::ModelInfo& info, int64_t created);
std::string ModelBody(const weft::v1::ModelInfo& info, int64_t created);

}  // namespace weft::openai

#endif  // WEFT_SCHEDULER_SERVICE_OPENAI_JSON_H_

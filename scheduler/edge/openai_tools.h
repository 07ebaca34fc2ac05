// Tool calling on the OpenAI chat-completions route: the body's `tools`, `tool_choice`,
// `parallel_tool_calls` and the tool turns of `messages`, mapped onto the public request
// (generate.proto: ChatPrompt.tools / tool_choice / parallel_tool_calls,
// ChatMessage.tool_calls / tool_call_id), kept apart from openai_json.cc's parser.
//
//   tools: [{"type": "function", "function": {"name", "description"?, "parameters"?,
//            "strict"?}}], at most kMaxTools, names unique and valid (chat_tools.h);
//          given to the template (its own tool rendering, else the Hermes fallback).
//   tool_choice (default "auto" with tools, "none" without):
//     "none"      plain generation; the model is still told about the tools.
//     "required"  the output is one or more calls and nothing else;
//     {"type": "function", "function": {"name": N}}  the same, of tool N only;
//     "auto"      text, and wherever the model starts a call (the format's trigger, e.g.
//                 "<tool_call>"), a well-formed call.
//   Each call is then held (generate_request.h's BuildSpec, for both APIs) by XGrammar's
//   structural tag to the model's tool-call format
//   (common/tool_call_format.h: its template's own — Hermes, Llama 3.x, Mistral — else the
//   Hermes fallback the prompt then shows), arguments valid against the tool's
//   parameters: "required"/named as tags_with_separator (at_least_one), "auto" as
//   triggered_tags — so a small model that starts a call finishes a well-formed one, and
//   the free text around it costs only a trigger scan. parallel_tool_calls: false
//   (default true; formats without parallel calls: always) stops after the first call.
//   The answer is then read by ToolCallParser (tool_call_parser.h).
// Errors are INVALID_ARGUMENT naming the body's field (kBodyFieldSchema): an unknown tool
// in tool_choice, a tool that is not a function, a bad name, parameters that are no JSON
// Schema object, tools with response_format, the deprecated `functions`.
// Thread-safety: pure functions.
#ifndef WEFT_SCHEDULER_EDGE_OPENAI_TOOLS_H_
#define WEFT_SCHEDULER_EDGE_OPENAI_TOOLS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "weft/v1/generate.pb.h"

namespace weft::openai {

// Reads tools / tool_choice / parallel_tool_calls into request->chat(); sets
// *parse_calls when the answer is to be read for calls. Call after the messages and
// response_format were read.
absl::Status ParseTools(const nlohmann::ordered_json& body, weft::v1::GenerateRequest* request,
                        bool* parse_calls);

// The tool fields of messages[i] (`at` = "messages[i]"): an assistant turn's tool_calls,
// a tool turn's tool_call_id.
absl::Status ParseMessageToolFields(const nlohmann::ordered_json& message, absl::string_view at,
                                    weft::v1::ChatMessage* out);

}  // namespace weft::openai

#endif  // WEFT_SCHEDULER_EDGE_OPENAI_TOOLS_H_

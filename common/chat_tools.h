// Tool calling in a chat prompt: the tool-call turns ChatTemplate renders, and the
// documented fallback for templates that cannot render tools (SmolLM2's ChatML, Gemma's):
// the Hermes style, as llama.cpp's Hermes templates write it —
//   * the tool definitions go into the system turn (appended to the first system message,
//     or a system message of their own at the front), one JSON object per line inside
//     <tools></tools>, with the instruction to call as below;
//   * an assistant turn's calls follow its text, each as
//       <tool_call>\n{"name": "<name>", "arguments": <arguments JSON>}\n</tool_call>
//     joined by "\n" (common/tool_call_format.h's kHermes syntax: the grammar for a call
//     is built from the same strings, so the model is held to the form it is shown);
//   * "tool" turns become a user turn, each result as
//       <tool_response>\n<content>\n</tool_response>
//     consecutive results joined by "\n" into one turn (templates that insist that user
//     and assistant alternate, as Gemma's does, still render).
// Everything written here comes from the request and stays literal text when tokenized.
// Thread-safety: pure functions.
#ifndef WEFT_COMMON_CHAT_TOOLS_H_
#define WEFT_COMMON_CHAT_TOOLS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace weft {

// A call the model made (OpenAI's tool_calls[i]): `arguments` is a JSON text.
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

// One turn of a chat, as ChatTemplate renders it.
struct ChatMessage {
  std::string role;     // "system", "user", "assistant", "tool", ...
  std::string content;
  // An assistant turn's calls (the template sees OpenAI's shape: {id, type: "function",
  // function: {name, arguments}}, arguments as an object where the template reads them
  // as one and the text is a JSON object).
  std::vector<ChatToolCall> tool_calls;
  // A "tool" turn: the call this is the result of.
  std::string tool_call_id;
};


// The most tools a request may define, and a tool name's longest length (OpenAI's).
inline constexpr int kMaxTools = 128;
inline constexpr size_t kMaxToolNameBytes = 64;

// A tool name: 1..64 characters of A-Z a-z 0-9 _ - (OpenAI's rule; it is written
// unescaped into JSON and grammars).
bool IsValidToolName(absl::string_view name);

// `messages` with tools and tool turns written in the Hermes style (see the top).
// `tools_json`: a JSON array of OpenAI tool definitions ({"type": "function",
// "function": {...}}), or "" for none. `system_role`: false for templates without a
// system turn (Gemma 2's raises on one): the system text then opens the first user turn.
// INVALID_ARGUMENT when tools_json is not a JSON array.
absl::StatusOr<std::vector<ChatMessage>> HermesToolMessages(absl::Span<const ChatMessage> messages,
                                                            absl::string_view tools_json,
                                                            bool system_role = true);

}  // namespace weft

#endif  // WEFT_COMMON_CHAT_TOOLS_H_

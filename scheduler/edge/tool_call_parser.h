// ToolCallParser: splits a chat answer generated under a tool-call grammar into its text
// and its calls, as the text arrives — the one reading of the output for both the
// streamed deltas and the whole message (openai_json.cc's ResponseBuilder), so the two
// cannot disagree.
//
// The form is the model's tool-call format (common/tool_call_format.h: Hermes
// <tool_call>\n{"name": "<name>", "arguments": <JSON>}\n</tool_call>, Llama 3.x
// {"name": "<name>", "parameters": <JSON>}, Mistral [TOOL_CALLS][{...}, ...] or
// [TOOL_CALLS]<name>[ARGS]<JSON>), any number of calls, text around them. A call starts
// where the format's trigger appears in the text; its name is known once its header
// (everything before the arguments, blanks allowed next to JSON punctuation) has
// arrived; its arguments then stream in fragments as the JSON value is scanned (strings
// and escapes tracked, so a '}' inside a string is no end), trailing blanks held; the
// call ends where the value closes, followed by the format's call suffix (and for
// Mistral Nemo's list, ", " + the next call or "]"). Hermes only: a <tool_call> block
// that does not follow the header's layout is read whole at its end tag as a JSON object
// {"name", "arguments"}; one that is no such object stays text. Elsewhere a trigger not
// followed by a header stays text. Text that could be the start of a trigger is held
// until it is known; blank text next to calls is dropped. Finish() gives what is held
// when the output ends (a call cut by max_tokens keeps the arguments it got).
//
// Ownership: a value type; one per choice of one call. Thread-compatible.
#ifndef WEFT_SCHEDULER_EDGE_TOOL_CALL_PARSER_H_
#define WEFT_SCHEDULER_EDGE_TOOL_CALL_PARSER_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/tool_call_format.h"

namespace weft::openai {

// A piece of one call: its first piece has the id and name, later ones more arguments.
struct ToolCallDelta {
  int index = 0;          // the call's position in the answer (0, 1, ...)
  std::string id;         // first piece only
  std::string name;       // first piece only
  std::string arguments;  // the next fragment of the arguments' JSON text
};

struct ParsedOutput {
  std::string content;
  std::vector<ToolCallDelta> calls;
  bool empty() const { return content.empty() && calls.empty(); }
  // Appends `later` (what the same parser gave next), a call's pieces merged.
  void Append(ParsedOutput later);
};

class ToolCallParser {
 public:
  // Call ids are ToolCallId(format, id_prefix, index) ("<id_prefix><index>" but for
  // Mistral's 9-character ids).
  explicit ToolCallParser(std::string id_prefix, ToolCallFormat format = ToolCallFormat::kHermes)
      : id_prefix_(std::move(id_prefix)), format_(format), syntax_(SyntaxOf(format)) {}

  // What `text` (the next bytes of the answer) lets show now.
  ParsedOutput Feed(absl::string_view text);
  // What was held, at the end of the answer.
  ParsedOutput Finish();

  // Calls whose header (or whole block) was read.
  int num_calls() const { return num_calls_; }
  // Calls whose arguments are complete (all of them after Finish).
  int num_closed_calls() const { return closed_calls_; }

 private:
  enum class State { kText, kHeader, kBlock, kArguments, kAfterCall, kBetween };
  void Step(ParsedOutput* out);
  bool StepText(ParsedOutput* out);
  bool StepHeader(ParsedOutput* out);
  bool StepBlock(ParsedOutput* out);
  bool StepArguments(ParsedOutput* out);
  bool StepAfterCall(ParsedOutput* out);
  bool StepBetween(ParsedOutput* out);
  void EmitText(absl::string_view text, ParsedOutput* out);
  void AddCallPiece(ToolCallDelta piece, ParsedOutput* out);
  void StartCall(std::string name, std::string arguments, ParsedOutput* out);

  const std::string id_prefix_;
  const ToolCallFormat format_;
  const ToolCallSyntax& syntax_;
  bool at_end_ = false;    // Finish: nothing more will come
  State state_ = State::kText;
  std::string buf_;        // bytes not consumed yet
  std::string blank_;      // blank text held (dropped when a call follows)
  size_t args_shown_ = 0;  // bytes of the current call's arguments shown (kArguments)
  // The arguments' JSON value as scanned so far (kArguments).
  size_t scanned_ = 0;
  int depth_ = 0;
  bool in_string_ = false, escape_ = false, started_ = false;
  bool after_call_ = false;  // no text since the last call ended
  int num_calls_ = 0;
  int closed_calls_ = 0;
};

// The same reading, each call given whole once it is closed (the gRPC API's
// GenerateResponse.tool_calls): content as it comes, calls[i] with all their arguments.
class ToolCallCollector {
 public:
  ToolCallCollector(std::string id_prefix, ToolCallFormat format)
      : parser_(std::move(id_prefix), format) {}
  ParsedOutput Feed(absl::string_view text) { return Take(parser_.Feed(text)); }
  ParsedOutput Finish() { return Take(parser_.Finish()); }
  int num_calls() const { return parser_.num_calls(); }

 private:
  ParsedOutput Take(ParsedOutput pieces);

  ToolCallParser parser_;
  ParsedOutput open_;  // calls not given yet, merged
};

// The prefix of the ids of the calls of one sample ("call_<request id>_<index>_"), for
// both APIs.
std::string ToolCallIdPrefix(absl::string_view request_id, int index);

// The whole answer read at once (Feed then Finish): its text, and each call whole
// (one ToolCallDelta per call, with all its arguments).
ParsedOutput ReadWholeAnswer(absl::string_view text, std::string id_prefix,
                             ToolCallFormat format = ToolCallFormat::kHermes);

}  // namespace weft::openai

#endif  // WEFT_SCHEDULER_EDGE_TOOL_CALL_PARSER_H_

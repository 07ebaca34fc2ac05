// ToolCallParser: splits a chat answer generated under a tool-call grammar into its text
// and its calls, as the text arrives — the one reading of the output for both the
// streamed deltas and the whole message (openai_json.cc's ResponseBuilder), so the two
// cannot disagree.
//
// The form (common/chat_tools.h): <tool_call>\n{"name": "<name>", "arguments": <JSON>}
// \n</tool_call>, any number of them, text around them. A call's name is known once its
// header ({"name": "...", "arguments": ) has arrived; its arguments then stream in
// fragments, each shown once no later byte can change it (everything before the last '}'
// seen and before a possible start of "</tool_call>", trailing blanks held). A block that does not follow the header's layout is read
// whole at its end tag as a JSON object {"name", "arguments"}; one that is no such object
// stays text. Text that could be the start of "<tool_call>" is held until it is known;
// blank text next to calls is dropped. Finish() gives what is held when the output ends
// (a call cut by max_tokens keeps the arguments it got).
//
// Ownership: a value type; one per choice of one call. Thread-compatible.
#ifndef WEFT_SCHEDULER_EDGE_TOOL_CALL_PARSER_H_
#define WEFT_SCHEDULER_EDGE_TOOL_CALL_PARSER_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

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
  // Call ids are "<id_prefix><index>".
  explicit ToolCallParser(std::string id_prefix) : id_prefix_(std::move(id_prefix)) {}

  // What `text` (the next bytes of the answer) lets show now.
  ParsedOutput Feed(absl::string_view text);
  // What was held, at the end of the answer.
  ParsedOutput Finish();

  // Calls whose header (or whole block) was read.
  int num_calls() const { return num_calls_; }

 private:
  enum class State { kText, kHeader, kArguments };
  void Step(ParsedOutput* out);
  bool StepText(ParsedOutput* out);
  bool StepHeader(ParsedOutput* out);
  bool StepArguments(ParsedOutput* out);
  void EmitText(absl::string_view text, ParsedOutput* out);
  void AddCallPiece(ToolCallDelta piece, ParsedOutput* out);
  void StartCall(std::string name, std::string arguments, ParsedOutput* out);

  const std::string id_prefix_;
  State state_ = State::kText;
  std::string buf_;        // bytes not consumed yet
  std::string blank_;      // blank text held (dropped when a call follows)
  size_t args_shown_ = 0;  // bytes of the current call's arguments shown (kArguments)
  bool after_call_ = false;  // no text since the last call ended
  int num_calls_ = 0;
};

// The whole answer read at once (Feed then Finish): its text, and each call whole
// (one ToolCallDelta per call, with all its arguments).
ParsedOutput ReadWholeAnswer(absl::string_view text, std::string id_prefix);

}  // namespace weft::openai

#endif  // WEFT_SCHEDULER_EDGE_TOOL_CALL_PARSER_H_

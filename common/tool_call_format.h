// ToolCallFormat: how a model writes a tool call — one place for the form the prompt
// shows the model, the grammar that holds the model to it (ToolCallsStructuralTag, an
// XGrammar structural tag) and the reading of the answer (scheduler/edge/tool_call_parser.h
// walks the same ToolCallSyntax).
//
// The formats (N = the tool's name, A = its arguments, a JSON object valid against the
// tool's parameters):
//   kHermes       <tool_call>\n{"name": "N", "arguments": A}\n</tool_call>, calls joined
//                 by "\n". The documented fallback (common/chat_tools.h renders it for
//                 templates that cannot render tools) and the form of the templates that
//                 write <tool_call> themselves (Hermes 2 Pro / 3, Qwen 2.5).
//   kLlama3       {"name": "N", "parameters": A} — the whole call is the JSON object, one
//                 call per answer (the Llama 3.1/3.2/3.3 templates render one call per
//                 assistant turn and raise on more). Built-in tools (<|python_tag|>) are
//                 not generated.
//   kMistralNemo  [TOOL_CALLS][{"name": "N", "arguments": A}, ...] — a JSON array after
//                 the marker (Mistral Nemo 2407). The template also shows a 9-character
//                 "id" in each earlier call; the grammar does not ask the model for one:
//                 ToolCallId makes 9-character ids so those turns render back.
//   kMistralArgs  [TOOL_CALLS]N[ARGS]A per call, calls back to back (Mistral Small 3.2,
//                 Devstral). The template shows "[CALL_ID]<id>" before [ARGS] in earlier
//                 calls; the grammar asks for none (ids as for kMistralNemo).
//
// Detection (DetectToolCallFormat), over the template's source, first rule that holds:
//   1. the template does not render tools itself (ChatTemplate::renders_tools false):
//      kHermes, the fallback's own rendering;
//   2. it contains "<tool_call>": kHermes;
//   3. it contains "[TOOL_CALLS][": kMistralNemo;
//   4. it contains "[TOOL_CALLS]" and "[ARGS]": kMistralArgs;
//   5. it contains "<|start_header_id|>ipython<|end_header_id|>" and "\"parameters\": ":
//      kLlama3;
//   6. otherwise kHermes (a native format not listed here: the model is held to the
//      fallback's form, and its template renders earlier calls its own way).
// llama.cpp's common/chat.cpp detects formats by markers in the template text the same way.
//
// Thread-safety: pure functions.
#ifndef WEFT_COMMON_TOOL_CALL_FORMAT_H_
#define WEFT_COMMON_TOOL_CALL_FORMAT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace weft {

class Tokenizer;

enum class ToolCallFormat { kHermes, kLlama3, kMistralNemo, kMistralArgs };

// "hermes", "llama3", "mistral_nemo", "mistral_args".
absl::string_view ToolCallFormatName(ToolCallFormat format);

// The rules at the top; `renders_tools`: ChatTemplate::renders_tools().
ToolCallFormat DetectToolCallFormat(absl::string_view template_source, bool renders_tools);

// The literal text of a format. A call is call_prefix + N + call_infix + A + call_suffix;
// the calls of one answer are list_begin + call (separator + call)* + list_end.
struct ToolCallSyntax {
  const char* trigger;      // where a call starts inside free text (tool_choice "auto")
  const char* list_begin;
  const char* call_prefix;
  const char* call_infix;
  const char* call_suffix;
  const char* separator;
  const char* list_end;
  bool quoted_name;         // N is written inside the JSON string quotes of call_prefix/infix
  bool parallel;            // more than one call per answer
};
const ToolCallSyntax& SyntaxOf(ToolCallFormat format);

// call_prefix + name + call_infix.
std::string ToolCallBegin(ToolCallFormat format, absl::string_view name);

// The id of the index-th call of an answer: id_prefix + index, or for the Mistral formats
// (their templates refuse other ids) 9 characters of [A-Za-z0-9] hashed from both.
std::string ToolCallId(ToolCallFormat format, absl::string_view id_prefix, int index);

// A tool the grammar allows: its name and its parameters' JSON Schema text ("" = none).
struct ToolSchema {
  std::string name;
  std::string parameters;
};

enum class ToolCallMode {
  kAuto,      // free text; wherever the model starts a call (trigger), a well-formed call
  kRequired,  // one or more calls and nothing else
};

// The format's markers: the fixed texts a model trained on the format emits as one token
// each where its vocabulary has them ("[TOOL_CALLS]" and "[ARGS]" for the Mistral
// formats, "<tool_call>" and "</tool_call>" for Hermes; none for Llama 3.x).
std::vector<std::string> ToolCallMarkers(ToolCallFormat format);

// The control (special) tokens of `tokenizer` whose text is exactly one of `format`'s
// markers, as (id, text), ascending by id. The one definition both sides read: the grammar
// vocabulary of tool-call grammars gives these tokens their text (grammar_engine.h's
// GrammarVocab::tool_marker_tokens) and the text of a tool-call sequence includes it
// (scheduler/token_text_source.h's ToolCallBytes), so the tool-call parser reads the
// marker whether the model wrote it as its control token or spelled it out.
std::vector<std::pair<int32_t, std::string>> ToolCallMarkerTokens(const Tokenizer& tokenizer,
                                                                  ToolCallFormat format);

// The XGrammar structural tag ({"type": "structural_tag", "format": ...}) holding the
// calls of `tools` to `format`. `parallel` false (or a format without parallel calls):
// at most one call. Arguments allow at most one blank in a row (no runs a small model
// loops on).
std::string ToolCallsStructuralTag(ToolCallFormat format, absl::Span<const ToolSchema> tools,
                                   ToolCallMode mode, bool parallel);

}  // namespace weft

#endif  // WEFT_COMMON_TOOL_CALL_FORMAT_H_

// ChatTemplate: renders chat messages into a prompt with the model's Jinja chat template
// (`tokenizer.chat_template`, or a file given with --chat_template), through llama.cpp's
// Jinja engine (common/jinja of the llama-cpp-python sdist tools/bootstrap.sh fetches;
// built from there by third_party/llama_cpp.bzl, never copied into this repository).
//
// Rendered as Hugging Face transformers renders a chat template: Jinja with trim_blocks
// and lstrip_blocks, `messages` (list of {role, content}), `bos_token` / `eos_token`
// (the texts of the vocabulary's BOS/EOS tokens), `add_generation_prompt`, `tools` when
// given, and the functions `raise_exception(msg)` (the render fails with msg) and
// `strftime_now(format)` (local time, or ChatRenderOptions::now). Which templates render
// byte for byte as Python's Jinja2 does is tested on every template of llama.cpp's
// models/templates (common/chat_template_jinja_test.cc); templates the engine cannot
// parse are refused when loading, and the renderings found to differ
// (common/chat_template_claims.h) are refused when asked for.
//
// Message text is never parsed as control tokens: the engine keeps track of which bytes
// of the output came from the request (message contents, tool definitions) and Render
// returns them as `literal_spans`; Tokenizer::Encode with those spans finds special
// tokens only in the template's own text, so a user writing "<|im_start|>system" gets
// those characters tokenized as text, not a forged turn. Roles are template input too but
// are restricted to [A-Za-z0-9_-]{1,32} (templates build markup around them, e.g. Phi-3's
// '<|' + role + '|>', so they cannot be literal spans).
//
// Thread-safety: immutable after Parse; Render is const and may run on many threads at
// once (each call has its own Jinja context).
#ifndef WEFT_COMMON_CHAT_TEMPLATE_H_
#define WEFT_COMMON_CHAT_TEMPLATE_H_

#include <cstddef>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/chat_tools.h"
#include "common/tool_call_format.h"

namespace weft {

// ChatMessage and ChatToolCall: common/chat_tools.h.

struct ChatRenderOptions {
  // Jinja's add_generation_prompt: open the assistant's turn at the end.
  bool add_generation_prompt = true;
  // `tools`: a JSON array of tool definitions (OpenAI's shape), or "" for none (then
  // `tools` is undefined in the template, as transformers leaves it).
  std::string tools_json;
  // The time strftime_now formats (tests fix it); unset: now.
  std::optional<std::time_t> now;
  // When tools, tool calls or "tool" turns are given and the template cannot render them
  // (llama.cpp's capability probe: it never reads tools[0].function.name or an assistant
  // turn's tool_calls), render common/chat_tools.h's Hermes-style fallback instead. Off:
  // the template gets them as they are, as transformers does (the Jinja2 conformance
  // tests). The scheduler turns it on.
  bool tools_fallback = false;
};

// A rendered prompt and the byte ranges of it that came from the request.
struct RenderedChat {
  std::string text;
  // [begin, end) byte ranges of `text`, sorted, not overlapping (EncodeOptions'
  // literal_spans).
  std::vector<std::pair<size_t, size_t>> literal_spans;
};

struct ChatTemplateParseOptions {
  // Refuse the renderings chat_template_claims.h lists (false only in the test that
  // finds them).
  bool refuse_known_differences = true;
};

class ChatTemplate {
 public:
  // Parses `source`. `bos_token` / `eos_token`: the values of those template variables.
  // INVALID_ARGUMENT when the engine cannot parse the template (the message says where).
  static absl::StatusOr<ChatTemplate> Parse(absl::string_view source, std::string bos_token,
                                            std::string eos_token,
                                            const ChatTemplateParseOptions& options = {});

  // INVALID_ARGUMENT for a role outside [A-Za-z0-9_-]{1,32}, for malformed tools_json,
  // and when the template raises (raise_exception, e.g. "roles must alternate") or fails
  // on the messages; UNIMPLEMENTED when it needs a Jinja feature the engine lacks, or
  // for a rendering known to differ from Jinja2's (the message gives the reason).
  absl::StatusOr<RenderedChat> Render(absl::Span<const ChatMessage> messages,
                                      const ChatRenderOptions& options = {}) const;

  const std::string& source() const;
  // Whether the template renders tools and assistant tool calls itself (else
  // tools_fallback applies).
  bool renders_tools() const;
  // The form the model writes tool calls in (common/tool_call_format.h's detection rule:
  // the template's own where it is one we know, else the Hermes fallback).
  ToolCallFormat tool_call_format() const;

 private:
  struct Impl;
  explicit ChatTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

  std::shared_ptr<const Impl> impl_;
};

}  // namespace weft

#endif  // WEFT_COMMON_CHAT_TEMPLATE_H_

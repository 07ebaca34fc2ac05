// ChatTemplate: renders chat messages into a prompt the way the GGUF's Jinja chat
// template (`tokenizer.chat_template`) does, for the templates we recognise, without a
// Jinja engine.
//
// Recognised: ChatML. The template must use <|im_start|> and <|im_end|> and render each
// message as
//     <|im_start|>{role}\n{content}<|im_end|>\n
// Templates that also handle tools or reasoning ("tool_calls", "tools",
// "reasoning_content", "enable_thinking", "<think>") render differently for some
// messages and are UNIMPLEMENTED, as is every non-ChatML template.
//
// A default system message: when the template emits a literal
// '<|im_start|>system\n...<|im_end|>\n' under a condition on the first message's role
// not being 'system' (SmolLM2: "You are a helpful AI assistant named SmolLM, trained by
// Hugging Face"), Render inserts it before the first message when that message is not
// a system one. (With no messages at all the template's loop never runs: nothing is
// inserted.) The text is read from the template, not hard-coded.
//
// The generation prompt "<|im_start|>assistant\n" is appended when asked (default).
// Special-token texts inside message content are left as they are (the Jinja template
// does the same); Tokenizer::Encode with parse_special then turns them into tokens,
// as llama.cpp does.
//
// Thread-safety: immutable value type.
#ifndef WEFT_COMMON_CHAT_TEMPLATE_H_
#define WEFT_COMMON_CHAT_TEMPLATE_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/gguf.h"

namespace weft {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", "tool", ...
  std::string content;
};

struct ChatRenderOptions {
  // Append "<|im_start|>assistant\n" (Jinja's add_generation_prompt).
  bool add_generation_prompt = true;
};

class ChatTemplate {
 public:
  // UNIMPLEMENTED for a template that is not recognised (see above).
  static absl::StatusOr<ChatTemplate> FromTemplateText(absl::string_view jinja);
  // Reads tokenizer.chat_template; UNIMPLEMENTED when the GGUF has none.
  static absl::StatusOr<ChatTemplate> FromGguf(const GgufFile& gguf);

  // INVALID_ARGUMENT for a role that is empty or holds a newline or "<|" (it would
  // forge the message structure); content is free text.
  absl::StatusOr<std::string> Render(absl::Span<const ChatMessage> messages,
                                     const ChatRenderOptions& options = {}) const;

  // The default system message's text, if the template has one.
  const std::optional<std::string>& default_system() const { return default_system_; }

 private:
  ChatTemplate() = default;

  std::optional<std::string> default_system_;
};

}  // namespace weft

#endif  // WEFT_COMMON_CHAT_TEMPLATE_H_

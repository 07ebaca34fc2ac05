// TokenizeChat: chat messages -> prompt token ids, through the model's ChatTemplate and
// Tokenizer, the way llama.cpp's server does it, except that message text is never parsed
// as special tokens.
//
//   1. The template renders the messages (ChatTemplate::Render); the bytes that came from
//      the request are literal spans.
//   2. When the vocabulary adds BOS (EOS) itself and the rendering starts (ends) with the
//      BOS (EOS) token's text written by the template, that text is dropped, so the
//      prompt does not get the token twice (llama.cpp's common_chat_templates_apply does
//      the same).
//   3. The text is tokenized with special tokens parsed in the template's text only
//      (EncodeOptions::literal_spans), BOS/EOS as the vocabulary says.
//
// Thread-safety: a pure function of const objects.
#ifndef WEFT_COMMON_CHAT_PROMPT_H_
#define WEFT_COMMON_CHAT_PROMPT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/chat_template.h"
#include "common/tokenizer.h"

namespace weft {

// The texts the template sees as bos_token / eos_token: the vocabulary's BOS/EOS token
// texts ("" when it has none).
std::string BosText(const Tokenizer& tokenizer);
std::string EosText(const Tokenizer& tokenizer);

// Errors are Render's.
absl::StatusOr<std::vector<int32_t>> TokenizeChat(const ChatTemplate& chat,
                                                  const Tokenizer& tokenizer,
                                                  absl::Span<const ChatMessage> messages,
                                                  const ChatRenderOptions& options = {});

}  // namespace weft

#endif  // WEFT_COMMON_CHAT_PROMPT_H_

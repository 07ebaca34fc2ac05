#include "common/chat_prompt.h"

#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "common/status_macros.h"

namespace weft {

std::string BosText(const Tokenizer& tokenizer) {
  return std::string(tokenizer.TokenText(tokenizer.bos_id()));
}

std::string EosText(const Tokenizer& tokenizer) {
  return std::string(tokenizer.TokenText(tokenizer.eos_id()));
}

absl::StatusOr<std::vector<int32_t>> TokenizeChat(const ChatTemplate& chat,
                                                  const Tokenizer& tokenizer,
                                                  absl::Span<const ChatMessage> messages,
                                                  const ChatRenderOptions& options) {
  WEFT_ASSIGN_OR_RETURN(RenderedChat r, chat.Render(messages, options));
  std::string& text = r.text;
  auto& spans = r.literal_spans;
  // Only the template's own text counts: a message that starts the rendering with the BOS
  // text is a literal span starting at 0.
  const std::string bos = BosText(tokenizer);
  if (tokenizer.add_bos() && !bos.empty() && absl::StartsWith(text, bos) &&
      (spans.empty() || spans.front().first >= bos.size())) {
    text.erase(0, bos.size());
    for (auto& [b, e] : spans) {
      b -= bos.size();
      e -= bos.size();
    }
  }
  const std::string eos = EosText(tokenizer);
  if (tokenizer.add_eos() && !eos.empty() && absl::EndsWith(text, eos) &&
      (spans.empty() || spans.back().second <= text.size() - eos.size())) {
    text.resize(text.size() - eos.size());
  }
  EncodeOptions o;
  o.parse_special = true;
  o.literal_spans = spans;
  return tokenizer.Encode(text, o);
}

}  // namespace weft

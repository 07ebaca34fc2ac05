// TokenTextSource: what the scheduler core needs from a tokenizer to build output
// text: the raw bytes of one token. Byte-level BPE tokens may be fragments of a UTF-8
// character; the core assembles them (StopChecker) and never emits a partial one.
//
// Ownership: implementations are owned by the caller and must outlive every Scheduler
// using them. Thread-safety: TokenBytes is const and must be safe to call from the
// planning thread while nothing mutates the source.
#ifndef WEFT_SCHEDULER_TOKEN_TEXT_SOURCE_H_
#define WEFT_SCHEDULER_TOKEN_TEXT_SOURCE_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace weft {

class TokenTextSource {
 public:
  virtual ~TokenTextSource() = default;
  // Raw UTF-8 bytes of `token_id` (possibly an incomplete character; empty for special
  // tokens that render as nothing). The view stays valid for the source's lifetime.
  virtual absl::string_view TokenBytes(int32_t token_id) const = 0;
  // The token as a logprobs entry names it: TokenBytes, except that a special token that
  // renders as nothing gives its own text ("<|im_end|>"), so clients can tell such
  // tokens apart.
  virtual absl::string_view DisplayBytes(int32_t token_id) const { return TokenBytes(token_id); }
  // The token's text in a sequence generated under a tool-call grammar
  // (IsToolCallGrammar, scheduler/grammar/constraint.h): TokenBytes, except that a control
  // token whose text is a marker of the model's tool-call format
  // (common/tool_call_format.h's ToolCallMarkerTokens, the same tokens the grammar lets
  // match that text) gives the marker, so the tool-call parser reads it.
  virtual absl::string_view ToolCallBytes(int32_t token_id) const { return TokenBytes(token_id); }
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_TOKEN_TEXT_SOURCE_H_

// Chat templates llama.cpp's Jinja engine parses but renders differently from Python's
// Jinja2 (found by common/chat_template_jinja_test.cc on llama.cpp's models/templates),
// identified by the sha256 of their source, with the renderings the difference touches
// (always, or only when tools are given). ChatTemplate::Render refuses those renderings
// with the reason (UNIMPLEMENTED) rather than serve a prompt Hugging Face would not
// produce.
//
// Thread-safety: pure functions over a constant table.
#ifndef WEFT_COMMON_CHAT_TEMPLATE_CLAIMS_H_
#define WEFT_COMMON_CHAT_TEMPLATE_CLAIMS_H_

#include <string>

#include "absl/strings/string_view.h"

namespace weft {

struct KnownChatTemplateDifference {
  const char* sha256 = nullptr;  // of the template source, lower-case hex
  const char* template_name = nullptr;  // in llama.cpp's models/templates
  bool only_with_tools = false;
  const char* reason = nullptr;
};

// The entry for `source`, or nullptr.
const KnownChatTemplateDifference* FindKnownChatTemplateDifference(absl::string_view source);

// Lower-case hex sha256 of `s`.
std::string ChatTemplateSha256(absl::string_view s);

}  // namespace weft

#endif  // WEFT_COMMON_CHAT_TEMPLATE_CLAIMS_H_

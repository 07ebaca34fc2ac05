// ByteEncoder: a PromptEncoder for the public APIs' tests without a tokenizer — a
// prompt's bytes are its token ids; chat is UNIMPLEMENTED unless `chat` is set (then the
// messages' contents, concatenated). Test-only.
#ifndef WEFT_SCHEDULER_EDGE_TESTING_BYTE_ENCODER_H_
#define WEFT_SCHEDULER_EDGE_TESTING_BYTE_ENCODER_H_

#include <string>
#include <vector>

#include "scheduler/edge/generate_request.h"

namespace weft::testing {

class ByteEncoder : public PromptEncoder {
 public:
  absl::StatusOr<std::vector<int32_t>> EncodeText(const std::string& text) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  absl::StatusOr<std::vector<int32_t>> EncodeChat(
      const weft::v1::ChatPrompt& prompt) const override {
    if (!chat) return absl::UnimplementedError("no chat");
    std::vector<int32_t> ids;
    for (const auto& m : prompt.messages()) {
      for (unsigned char c : m.content()) ids.push_back(c);
    }
    return ids;
  }
  ToolCallFormat tool_call_format() const override { return format; }
  bool chat = false;
  ToolCallFormat format = ToolCallFormat::kHermes;
};

}  // namespace weft::testing

#endif  // WEFT_SCHEDULER_EDGE_TESTING_BYTE_ENCODER_H_

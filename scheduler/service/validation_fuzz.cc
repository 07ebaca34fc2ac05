// libFuzzer target: arbitrary bytes parsed as a GenerateRequest and validated. Must never
// crash; any accepted request respects the limits.
#include <cstddef>
#include <cstdint>

#include "scheduler/service/validation.h"

namespace {

class ByteEncoder : public weft::PromptEncoder {
 public:
  absl::StatusOr<std::vector<int32_t>> EncodeText(const std::string& text) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  absl::StatusOr<std::vector<int32_t>> EncodeChat(
      const weft::v1::ChatPrompt& chat) const override {
    std::vector<int32_t> ids;
    for (const auto& m : chat.messages()) {
      for (unsigned char c : m.content()) ids.push_back(c);
    }
    return ids;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weft::v1::GenerateRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
  weft::ValidationLimits lim;
  lim.model_name = "m";
  lim.vocab_size = 300;
  lim.context_length = 512;
  auto r = weft::ValidateRequest(req, lim, ByteEncoder(), [] { return 1u; });
  if (r.ok()) {
    const size_t total = r->prompt_token_ids.size() + static_cast<size_t>(r->max_tokens);
    if (r->prompt_token_ids.empty() || total > 512 || r->max_tokens < 1 || r->n < 1 ||
        r->n > lim.max_n) {
      __builtin_trap();
    }
    for (int32_t id : r->prompt_token_ids) {
      if (id < 0 || id >= 300) __builtin_trap();
    }
  }
  return 0;
}

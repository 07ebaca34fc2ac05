// ModelText: what the scheduler needs from the model file — no weights. The tokenizer
// (prompt encoding, token bytes for detokenization), the chat template, end-of-generation
// ids, and the shape workers must match (ExpectedModel: fingerprint, heads, FFN, vocab).
//
// Chat: the GGUF's tokenizer.chat_template, or the file given as `chat_template_path`
// (--chat_template; it replaces the GGUF's), rendered by common/chat_template.h and
// tokenized by common/chat_prompt.h (message text is never parsed as special tokens).
// A model without a usable template refuses chat prompts with UNIMPLEMENTED saying why
// (HTTP 400); a --chat_template file that cannot be read or parsed fails Load.
//
// Ownership: borrows nothing after Load (copies what it needs out of the GgufFile).
// Thread-safety: immutable after Load; every method is safe from any thread.
#ifndef WEFT_SCHEDULER_SERVICE_MODEL_TEXT_H_
#define WEFT_SCHEDULER_SERVICE_MODEL_TEXT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/chat_template.h"
#include "common/gguf.h"
#include "common/tokenizer.h"
#include "scheduler/service/replica_registry.h"
#include "scheduler/edge/generate_request.h"
#include "scheduler/token_text_source.h"
#include "weft/v1/generate.pb.h"

namespace weft {

// The name a model is served under when --model_name is not given: the file's stem
// (its name without directories and without the last extension), lower case, with
// every character other than a-z 0-9 '.' '_' '-' replaced by '-'
// ("models/SmolLM2-135M-Instruct.Q4_1.gguf" -> "smollm2-135m-instruct.q4_1").
std::string DefaultModelName(absl::string_view gguf_path);

// OK when `name` can be routed by: 1..127 printable ASCII characters without spaces
// (it travels as x-weft-model metadata / an HTTP header value and names a health
// service; proxies encode its length in one byte).
absl::Status CheckModelName(absl::string_view name);

class ModelText {
 public:
  // `model_name` is the name clients route by (CheckModelName must accept it);
  // `chat_template_path`: a Jinja file replacing the GGUF's template ("" = the GGUF's).
  static absl::StatusOr<std::unique_ptr<ModelText>> Load(
      const GgufFile& file, const std::string& model_name,
      const std::string& chat_template_path = "");

  const std::string& name() const { return name_; }
  int32_t context_length() const { return context_length_; }
  int32_t vocab_size() const { return tokenizer_->vocab_size(); }
  const std::vector<int32_t>& eos_token_ids() const { return tokenizer_->eog_ids(); }
  ExpectedModel expected_model(int32_t block_size) const;
  weft::v1::ModelInfo model_info() const;
  const TokenTextSource& text_source() const { return *text_source_; }
  const PromptEncoder& encoder() const { return *encoder_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  ModelText() = default;

  std::string name_;
  std::string fingerprint_;
  int32_t context_length_ = 0;
  int32_t n_head_ = 0, n_head_kv_ = 0;
  int64_t n_ff_ = 0;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_;
  std::string no_chat_reason_;  // why chat_ is empty
  std::unique_ptr<TokenTextSource> text_source_;
  std::unique_ptr<PromptEncoder> encoder_;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_MODEL_TEXT_H_

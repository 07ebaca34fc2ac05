#include "scheduler/edge/model_text.h"

#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/chat_prompt.h"
#include "common/model_config.h"
#include "common/tool_call_format.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"

namespace weft {
namespace {

class TokenizerText : public TokenTextSource {
 public:
  TokenizerText(const Tokenizer* t, ToolCallFormat format)
      : t_(t), markers_(ToolCallMarkerTokens(*t, format)) {}
  absl::string_view TokenBytes(int32_t id) const override { return t_->TokenBytes(id); }
  absl::string_view DisplayBytes(int32_t id) const override {
    const absl::string_view bytes = t_->TokenBytes(id);
    return bytes.empty() ? t_->TokenText(id) : bytes;
  }
  absl::string_view ToolCallBytes(int32_t id) const override {
    for (const auto& [marker_id, text] : markers_) {  // at most two
      if (marker_id == id) return text;
    }
    return t_->TokenBytes(id);
  }

 private:
  const Tokenizer* t_;
  const std::vector<std::pair<int32_t, std::string>> markers_;
};

// The request's tools as the template sees them: OpenAI's definitions
// [{"type": "function", "function": {"name", "description", "parameters"}}] ("" for none).
// The parameters are JSON texts the edge has checked (generate_request.cc).
std::string ToolsJson(const weft::v1::ChatPrompt& chat) {
  if (chat.tools().empty()) return "";
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& t : chat.tools()) {
    nlohmann::ordered_json f = nlohmann::ordered_json::object();
    f["name"] = t.name();
    if (!t.description().empty()) f["description"] = t.description();
    f["parameters"] = t.parameters().empty()
                          ? nlohmann::ordered_json::object()
                          : nlohmann::ordered_json::parse(t.parameters(), nullptr, false);
    nlohmann::ordered_json tool = nlohmann::ordered_json::object();
    tool["type"] = "function";
    tool["function"] = std::move(f);
    list.push_back(std::move(tool));
  }
  return list.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

class TokenizerEncoder : public PromptEncoder {
 public:
  TokenizerEncoder(const Tokenizer* t, const ChatTemplate* chat, std::string no_chat_reason)
      : t_(t), chat_(chat), no_chat_reason_(std::move(no_chat_reason)) {}

  absl::StatusOr<std::vector<int32_t>> EncodeText(const std::string& text) const override {
    EncodeOptions o;
    o.parse_special = true;  // as llama.cpp's --prompt: "<|im_start|>" is that token
    return t_->Encode(text, o);
  }

  absl::StatusOr<std::vector<int32_t>> EncodeChat(const weft::v1::ChatPrompt& chat) const override {
    if (chat_ == nullptr) {
      return absl::UnimplementedError(absl::StrCat(
          "chat prompts are not available for this model: ", no_chat_reason_,
          "; send a text prompt instead"));
    }
    std::vector<ChatMessage> messages;
    messages.reserve(chat.messages_size());
    for (const auto& m : chat.messages()) {
      ChatMessage& out = messages.emplace_back(ChatMessage{m.role(), m.content()});
      for (const auto& c : m.tool_calls()) out.tool_calls.push_back({c.id(), c.name(), c.arguments()});
      out.tool_call_id = m.tool_call_id();
    }
    ChatRenderOptions options;
    options.tools_json = ToolsJson(chat);
    options.tools_fallback = true;
    return TokenizeChat(*chat_, *t_, messages, options);
  }

  ToolCallFormat tool_call_format() const override {
    return chat_ == nullptr ? ToolCallFormat::kHermes : chat_->tool_call_format();
  }

 private:
  const Tokenizer* t_;
  const ChatTemplate* chat_;
  std::string no_chat_reason_;
};

absl::StatusOr<std::string> ReadTemplateFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat("--chat_template ", path, ": cannot read"));
  }
  std::ostringstream data;
  data << in.rdbuf();
  return data.str();
}

}  // namespace

std::string DefaultModelName(absl::string_view gguf_path) {
  absl::string_view stem = gguf_path.substr(gguf_path.rfind('/') + 1);  // npos + 1 == 0
  if (const size_t dot = stem.rfind('.'); dot != absl::string_view::npos && dot > 0) {
    stem = stem.substr(0, dot);
  }
  std::string name;
  for (char c : stem.substr(0, 127)) {
    c = absl::ascii_tolower(c);
    const bool keep = absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-';
    name.push_back(keep ? c : '-');
  }
  return name.empty() ? "default" : name;
}

absl::Status CheckModelName(absl::string_view name) {
  if (name.empty() || name.size() > 127) {
    return absl::InvalidArgumentError("a model name is 1..127 characters");
  }
  for (char c : name) {
    if (c <= 0x20 || c >= 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model name '", name, "': printable ASCII without spaces only (it travels as ",
          kModelMetadataKey, " metadata)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ModelText>> ModelText::Load(
    const GgufFile& file, const std::string& model_name, const std::string& chat_template_path) {
  std::unique_ptr<ModelText> m(new ModelText());
  // The description the workers compute from: a file they would refuse (an unknown
  // architecture, a missing or unused tensor) is refused here, before any port opens.
  WEFT_ASSIGN_OR_RETURN(const ModelConfig config, ModelConfig::FromGguf(file));
  WEFT_ASSIGN_OR_RETURN(m->tokenizer_, Tokenizer::FromGguf(file));
  m->context_length_ = config.context_length;
  m->n_head_ = config.num_heads;
  m->n_head_kv_ = config.num_kv_heads;
  m->n_ff_ = config.ffn_size;
  m->fingerprint_ = file.Fingerprint();
  WEFT_RETURN_IF_ERROR(CheckModelName(model_name));
  m->name_ = model_name;
  const std::string bos = BosText(*m->tokenizer_);
  const std::string eos = EosText(*m->tokenizer_);
  if (!chat_template_path.empty()) {
    WEFT_ASSIGN_OR_RETURN(const std::string source, ReadTemplateFile(chat_template_path));
    auto chat = ChatTemplate::Parse(source, bos, eos);
    if (!chat.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--chat_template ", chat_template_path, ": ", chat.status().message()));
    }
    m->chat_ = *std::move(chat);
  } else if (auto source = file.GetString("tokenizer.chat_template"); source.ok()) {
    auto chat = ChatTemplate::Parse(*source, bos, eos);
    if (chat.ok()) {
      m->chat_ = *std::move(chat);
    } else {
      m->no_chat_reason_ = absl::StrCat("its tokenizer.chat_template ", chat.status().message());
    }
  } else {
    m->no_chat_reason_ =
        "the model file has no tokenizer.chat_template (start the scheduler with "
        "--chat_template FILE)";
  }
  if (!m->chat_.has_value()) LOG(WARNING) << "chat prompts disabled: " << m->no_chat_reason_;
  m->text_source_ = std::make_unique<TokenizerText>(
      m->tokenizer_.get(),
      m->chat_.has_value() ? m->chat_->tool_call_format() : ToolCallFormat::kHermes);
  m->encoder_ = std::make_unique<TokenizerEncoder>(
      m->tokenizer_.get(), m->chat_.has_value() ? &*m->chat_ : nullptr, m->no_chat_reason_);
  return m;
}

ExpectedModel ModelText::expected_model(int32_t block_size) const {
  ExpectedModel e;
  e.fingerprint = fingerprint_;
  e.block_size = block_size;
  e.vocab_size = vocab_size();
  e.n_head = n_head_;
  e.n_head_kv = n_head_kv_;
  e.n_ff = n_ff_;
  return e;
}

weft::v1::ModelInfo ModelText::model_info() const {
  weft::v1::ModelInfo info;
  info.set_name(name_);
  info.set_fingerprint(fingerprint_);
  info.set_context_length(context_length_);
  info.set_vocab_size(vocab_size());
  info.set_chat_template(chat_.has_value() ? "jinja" : "");
  return info;
}

}  // namespace weft

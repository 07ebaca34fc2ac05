#include "worker/model/llama_config.h"

#include <limits>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace weft {
namespace {

absl::StatusOr<int32_t> GetPositiveInt(const GgufFile& file, const std::string& key,
                                       std::optional<int64_t> def = std::nullopt) {
  absl::StatusOr<int64_t> v = def ? file.GetIntOr(key, *def) : file.GetInt(key);
  if (!v.ok()) {
    if (absl::IsNotFound(v.status())) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF metadata key ", key, " is missing"));
    }
    return v.status();
  }
  if (*v <= 0 || *v > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(key, " = ", *v, " is out of range"));
  }
  return static_cast<int32_t>(*v);
}

absl::Status CheckRopeScaling(const GgufFile& file) {
  if (file.Find("llama.rope.scaling.type") == nullptr) return absl::OkStatus();
  WEFT_ASSIGN_OR_RETURN(const std::string type, file.GetString("llama.rope.scaling.type"));
  if (type == "none") return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat("RoPE scaling '", type, "' is not supported"));
}

}  // namespace

absl::Status LlamaConfig::Validate() const {
  if (num_layers <= 0 || hidden_size <= 0 || ffn_size <= 0 || num_heads <= 0 ||
      num_kv_heads <= 0 || head_dim <= 0 || context_length <= 0 || vocab_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("non-positive size in ", DebugString()));
  }
  if (num_heads % num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(num_heads, " heads are not a multiple of ",
                                                   num_kv_heads, " KV heads"));
  }
  if (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope dimension ", rope_dim, " must be even and in (0, ", head_dim, "]"));
  }
  if (!(rope_freq_base > 0.0f) || !(rms_norm_eps > 0.0f)) {
    return absl::InvalidArgumentError("rope.freq_base and rms epsilon must be positive");
  }
  return absl::OkStatus();
}

absl::StatusOr<LlamaConfig> LlamaConfig::FromGguf(const GgufFile& file) {
  absl::StatusOr<std::string> arch = file.GetString("general.architecture");
  if (!arch.ok()) {
    return absl::InvalidArgumentError("GGUF has no general.architecture");
  }
  if (*arch != "llama") {
    return absl::UnimplementedError(
        absl::StrCat("architecture '", *arch, "' is not supported (only llama)"));
  }
  WEFT_RETURN_IF_ERROR(CheckRopeScaling(file));
  LlamaConfig c;
  WEFT_ASSIGN_OR_RETURN(c.num_layers, GetPositiveInt(file, "llama.block_count"));
  WEFT_ASSIGN_OR_RETURN(c.hidden_size, GetPositiveInt(file, "llama.embedding_length"));
  WEFT_ASSIGN_OR_RETURN(c.ffn_size, GetPositiveInt(file, "llama.feed_forward_length"));
  WEFT_ASSIGN_OR_RETURN(c.num_heads, GetPositiveInt(file, "llama.attention.head_count"));
  WEFT_ASSIGN_OR_RETURN(c.num_kv_heads,
                        GetPositiveInt(file, "llama.attention.head_count_kv", c.num_heads));
  WEFT_ASSIGN_OR_RETURN(c.head_dim, GetPositiveInt(file, "llama.attention.key_length",
                                                   c.hidden_size / c.num_heads));
  WEFT_ASSIGN_OR_RETURN(const int32_t value_length,
                        GetPositiveInt(file, "llama.attention.value_length", c.head_dim));
  if (value_length != c.head_dim) {
    return absl::UnimplementedError("attention value_length != key_length");
  }
  WEFT_ASSIGN_OR_RETURN(c.rope_dim,
                        GetPositiveInt(file, "llama.rope.dimension_count", c.head_dim));
  WEFT_ASSIGN_OR_RETURN(const double base, file.GetFloatOr("llama.rope.freq_base", 10000.0));
  c.rope_freq_base = static_cast<float>(base);
  absl::StatusOr<double> eps = file.GetFloat("llama.attention.layer_norm_rms_epsilon");
  if (!eps.ok()) {
    return absl::InvalidArgumentError(
        "GGUF metadata key llama.attention.layer_norm_rms_epsilon is missing or not a number");
  }
  c.rms_norm_eps = static_cast<float>(*eps);
  WEFT_ASSIGN_OR_RETURN(c.context_length, GetPositiveInt(file, "llama.context_length"));

  const GgufTensor* embd = file.FindTensor("token_embd.weight");
  if (embd == nullptr) return absl::InvalidArgumentError("tensor token_embd.weight is missing");
  if (embd->ne.size() != 2 || embd->ne[0] != c.hidden_size || embd->ne[1] <= 0 ||
      embd->ne[1] > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("token_embd.weight must be [", c.hidden_size, ", vocab]"));
  }
  c.vocab_size = static_cast<int32_t>(embd->ne[1]);
  if (file.Find("llama.vocab_size") != nullptr) {
    WEFT_ASSIGN_OR_RETURN(const int64_t vocab, file.GetInt("llama.vocab_size"));
    if (vocab != c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("llama.vocab_size ", vocab,
                                                     " != token_embd rows ", c.vocab_size));
    }
  }
  c.tied_embeddings = file.FindTensor("output.weight") == nullptr;
  WEFT_RETURN_IF_ERROR(c.Validate());
  return c;
}

std::string LlamaConfig::DebugString() const {
  return absl::StrCat("llama{layers=", num_layers, " hidden=", hidden_size, " ffn=", ffn_size,
                      " heads=", num_heads, "/", num_kv_heads, " head_dim=", head_dim,
                      " rope_dim=", rope_dim, " rope_base=", rope_freq_base,
                      " eps=", rms_norm_eps, " ctx=", context_length, " vocab=", vocab_size,
                      tied_embeddings ? " tied" : "", "}");
}

}  // namespace weft

#include "common/model_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace weft {
namespace {

// What an architecture fixes (everything else is read from the file).
struct ArchTraits {
  const char* name;
  RopePairing pairing;
  FfnActivation activation;
  bool qkv_bias;
  bool qk_norm;
  bool post_norms;        // post_attention_norm and post_ffw_norm
  bool rope_freqs;        // may carry rope_freqs.weight (Llama 3 scaling)
  bool gemma;             // sqrt(hidden) embedding scale, sliding-window layers
};

constexpr ArchTraits kArchitectures[] = {
    {"llama", RopePairing::kAdjacent, FfnActivation::kSilu, false, false, false, true, false},
    {"qwen2", RopePairing::kHalves, FfnActivation::kSilu, true, false, false, false, false},
    {"qwen3", RopePairing::kHalves, FfnActivation::kSilu, false, true, false, false, false},
    {"gemma3", RopePairing::kHalves, FfnActivation::kGeluTanh, false, true, true, false, true},
};

// Gemma 3's default: five local layers, then a global one (llama.cpp's load_swa_pattern).
constexpr int64_t kGemmaSwaPattern = 6;
constexpr double kDefaultRopeBase = 10000.0;

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

absl::StatusOr<float> GetFiniteFloat(const GgufFile& file, const std::string& key,
                                     double def) {
  WEFT_ASSIGN_OR_RETURN(const double v, file.GetFloatOr(key, def));
  if (!std::isfinite(v)) return absl::InvalidArgumentError(absl::StrCat(key, " is not finite"));
  return static_cast<float>(v);
}

// The global layers' RoPE: base and linear scaling (yarn / longrope refused).
absl::StatusOr<RopeSpec> ReadRope(const GgufFile& file, const std::string& p) {
  RopeSpec r;
  WEFT_ASSIGN_OR_RETURN(r.freq_base, GetFiniteFloat(file, p + "rope.freq_base", kDefaultRopeBase));
  if (file.Find(p + "rope.scaling.type") != nullptr) {
    WEFT_ASSIGN_OR_RETURN(const std::string type, file.GetString(p + "rope.scaling.type"));
    if (type != "none" && type != "linear") {
      return absl::UnimplementedError(
          absl::StrCat("RoPE scaling '", type, "' is not supported (none, linear and llama3's ",
                       "rope_freqs.weight are)"));
    }
  }
  // llama.cpp applies the factor whatever the type says (1 / factor; 0 = none).
  const std::string factor_key = file.Find(p + "rope.scaling.factor") != nullptr
                                     ? p + "rope.scaling.factor"
                                     : p + "rope.scale_linear";
  WEFT_ASSIGN_OR_RETURN(const float factor, GetFiniteFloat(file, factor_key, 0.0));
  if (factor < 0) return absl::InvalidArgumentError(absl::StrCat(factor_key, " is negative"));
  r.freq_scale = factor == 0 ? 1.0f : 1.0f / factor;
  return r;
}

// Which layers of a gemma3 file are local: the pattern key is an int P (local when
// l % P < P - 1) or one bool per layer.
absl::StatusOr<std::vector<bool>> SwaLayers(const GgufFile& file, const std::string& key,
                                            int32_t num_layers) {
  std::vector<bool> swa(num_layers);
  const GgufValue* v = file.Find(key);
  if (v != nullptr && v->type == GgufValueType::kArray) {
    WEFT_ASSIGN_OR_RETURN(const std::vector<int64_t>* flags, file.GetIntArray(key));
    if (static_cast<int64_t>(flags->size()) != num_layers) {
      return absl::InvalidArgumentError(absl::StrCat(key, " has ", flags->size(),
                                                     " entries for ", num_layers, " layers"));
    }
    for (int32_t l = 0; l < num_layers; ++l) swa[l] = (*flags)[l] != 0;
    return swa;
  }
  WEFT_ASSIGN_OR_RETURN(const int64_t pattern, file.GetIntOr(key, kGemmaSwaPattern));
  if (pattern < 0 || pattern > num_layers + 1) {
    return absl::InvalidArgumentError(absl::StrCat(key, " = ", pattern, " is out of range"));
  }
  for (int32_t l = 0; l < num_layers; ++l) swa[l] = pattern == 0 || l % pattern < pattern - 1;
  return swa;
}

// Gemma 3: embedding scale, attention scale, soft-capping, local/global layers.
absl::Status ReadGemma(const GgufFile& file, const std::string& p, ModelConfig* c) {
  c->embedding_scale = std::sqrt(static_cast<float>(c->hidden_size));
  // llama.cpp (src/models/gemma3.cpp): the 27B model (62 layers) scales by
  // 1/sqrt(hidden / heads), the others by 1/sqrt(head_dim).
  const int32_t scale_dim = c->num_layers == 62 ? c->hidden_size / c->num_heads : c->head_dim;
  c->attention_scale = 1.0f / std::sqrt(static_cast<float>(scale_dim));
  WEFT_ASSIGN_OR_RETURN(c->final_logit_softcap,
                        GetFiniteFloat(file, p + "final_logit_softcapping", 0.0));
  WEFT_ASSIGN_OR_RETURN(const int64_t window, file.GetIntOr(p + "attention.sliding_window", 0));
  if (window < 0 || window > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(p, "attention.sliding_window is out of range"));
  }
  if (window == 0) return absl::OkStatus();
  WEFT_ASSIGN_OR_RETURN(const std::vector<bool> swa,
                        SwaLayers(file, p + "attention.sliding_window_pattern", c->num_layers));
  RopeSpec local;
  WEFT_ASSIGN_OR_RETURN(local.freq_base,
                        GetFiniteFloat(file, p + "rope.freq_base_swa", kDefaultRopeBase));
  for (int32_t l = 0; l < c->num_layers; ++l) {
    if (!swa[l]) continue;
    c->layers[l].sliding_window = static_cast<int32_t>(window);
    c->layers[l].rope = local;
  }
  return absl::OkStatus();
}

absl::Status CheckTensors(const GgufFile& file, const ModelConfig& c) {
  std::set<std::string> used;
  for (const TensorSpec& spec : c.Tensors()) {
    used.insert(spec.name);
    const GgufTensor* t = file.FindTensor(spec.name);
    if (t == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", spec.name, " is missing (",
                                                     c.architecture, ")"));
    }
    if (t->ne != spec.ne) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", spec.name, " has shape [", absl::StrJoin(t->ne, ", "), "], ",
          c.architecture, " needs [", absl::StrJoin(spec.ne, ", "), "]"));
    }
  }
  for (const GgufTensor& t : file.tensors()) {
    if (used.count(t.name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", t.name, " is not used by architecture ", c.architecture,
          ": refused rather than ignored"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> SupportedArchitectures() {
  std::vector<std::string> names;
  for (const ArchTraits& a : kArchitectures) names.push_back(a.name);
  return names;
}

int32_t ModelConfig::max_sliding_window() const {
  int32_t w = 0;
  for (const LayerSpec& l : layers) w = std::max(w, l.sliding_window);
  return w;
}

absl::Status ModelConfig::Validate() const {
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
  if (!(rms_norm_eps > 0.0f) || !(attention_scale > 0.0f) || !(embedding_scale > 0.0f) ||
      !(final_logit_softcap >= 0.0f)) {
    return absl::InvalidArgumentError(
        "rms epsilon, attention and embedding scales must be positive, soft-capping >= 0");
  }
  if (static_cast<int32_t>(layers.size()) != num_layers) {
    return absl::InvalidArgumentError(absl::StrCat(layers.size(), " layer specs for ",
                                                   num_layers, " layers"));
  }
  for (const LayerSpec& l : layers) {
    if (l.sliding_window < 0 || !(l.rope.freq_base > 0.0f) || !(l.rope.freq_scale > 0.0f)) {
      return absl::InvalidArgumentError(
          "sliding window >= 0, rope.freq_base and the RoPE scale > 0 required");
    }
  }
  return absl::OkStatus();
}

std::vector<TensorSpec> ModelConfig::Tensors() const {
  const int64_t h = hidden_size, hd = head_dim;
  const int64_t qw = int64_t{num_heads} * hd, kvw = int64_t{num_kv_heads} * hd;
  std::vector<TensorSpec> t = {{"token_embd.weight", {h, vocab_size}},
                               {"output_norm.weight", {h}}};
  if (!tied_embeddings) t.push_back({"output.weight", {h, vocab_size}});
  if (std::any_of(layers.begin(), layers.end(),
                  [](const LayerSpec& l) { return l.rope.freq_factors; })) {
    t.push_back({"rope_freqs.weight", {rope_dim / 2}});
  }
  for (int32_t i = 0; i < num_layers && i < static_cast<int32_t>(layers.size()); ++i) {
    const LayerSpec& l = layers[i];
    const std::string p = absl::StrCat("blk.", i, ".");
    t.push_back({p + "attn_norm.weight", {h}});
    t.push_back({p + "attn_q.weight", {h, qw}});
    t.push_back({p + "attn_k.weight", {h, kvw}});
    t.push_back({p + "attn_v.weight", {h, kvw}});
    if (l.qkv_bias) {
      t.push_back({p + "attn_q.bias", {qw}});
      t.push_back({p + "attn_k.bias", {kvw}});
      t.push_back({p + "attn_v.bias", {kvw}});
    }
    if (l.qk_norm) {
      t.push_back({p + "attn_q_norm.weight", {hd}});
      t.push_back({p + "attn_k_norm.weight", {hd}});
    }
    t.push_back({p + "attn_output.weight", {qw, h}});
    if (l.post_attention_norm) t.push_back({p + "post_attention_norm.weight", {h}});
    t.push_back({p + "ffn_norm.weight", {h}});
    t.push_back({p + "ffn_gate.weight", {h, ffn_size}});
    t.push_back({p + "ffn_up.weight", {h, ffn_size}});
    t.push_back({p + "ffn_down.weight", {ffn_size, h}});
    if (l.post_ffn_norm) t.push_back({p + "post_ffw_norm.weight", {h}});
  }
  return t;
}

absl::StatusOr<ModelConfig> ModelConfig::FromGguf(const GgufFile& file) {
  absl::StatusOr<std::string> arch = file.GetString("general.architecture");
  if (!arch.ok()) return absl::InvalidArgumentError("GGUF has no general.architecture");
  const ArchTraits* traits = nullptr;
  for (const ArchTraits& a : kArchitectures) {
    if (*arch == a.name) traits = &a;
  }
  if (traits == nullptr) {
    return absl::UnimplementedError(absl::StrCat("architecture '", *arch, "' is not supported (",
                                                 absl::StrJoin(SupportedArchitectures(), ", "),
                                                 " are)"));
  }
  const std::string p = *arch + ".";
  ModelConfig c;
  c.architecture = *arch;
  c.rope_pairing = traits->pairing;
  WEFT_ASSIGN_OR_RETURN(c.num_layers, GetPositiveInt(file, p + "block_count"));
  WEFT_ASSIGN_OR_RETURN(c.hidden_size, GetPositiveInt(file, p + "embedding_length"));
  WEFT_ASSIGN_OR_RETURN(c.ffn_size, GetPositiveInt(file, p + "feed_forward_length"));
  WEFT_ASSIGN_OR_RETURN(c.num_heads, GetPositiveInt(file, p + "attention.head_count"));
  WEFT_ASSIGN_OR_RETURN(c.num_kv_heads,
                        GetPositiveInt(file, p + "attention.head_count_kv", c.num_heads));
  WEFT_ASSIGN_OR_RETURN(c.head_dim, GetPositiveInt(file, p + "attention.key_length",
                                                   c.hidden_size / c.num_heads));
  WEFT_ASSIGN_OR_RETURN(const int32_t value_length,
                        GetPositiveInt(file, p + "attention.value_length", c.head_dim));
  if (value_length != c.head_dim) {
    return absl::UnimplementedError("attention value_length != key_length");
  }
  WEFT_ASSIGN_OR_RETURN(c.rope_dim, GetPositiveInt(file, p + "rope.dimension_count", c.head_dim));
  absl::StatusOr<double> eps = file.GetFloat(p + "attention.layer_norm_rms_epsilon");
  if (!eps.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GGUF metadata key ", p, "attention.layer_norm_rms_epsilon is missing or not a number"));
  }
  c.rms_norm_eps = static_cast<float>(*eps);
  WEFT_ASSIGN_OR_RETURN(c.context_length, GetPositiveInt(file, p + "context_length"));
  c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  const GgufTensor* embd = file.FindTensor("token_embd.weight");
  if (embd == nullptr) return absl::InvalidArgumentError("tensor token_embd.weight is missing");
  if (embd->ne.size() != 2 || embd->ne[1] <= 0 ||
      embd->ne[1] > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("token_embd.weight must be [", c.hidden_size, ", vocab]"));
  }
  c.vocab_size = static_cast<int32_t>(embd->ne[1]);
  if (file.Find(p + "vocab_size") != nullptr) {
    WEFT_ASSIGN_OR_RETURN(const int64_t vocab, file.GetInt(p + "vocab_size"));
    if (vocab != c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(p, "vocab_size ", vocab,
                                                     " != token_embd rows ", c.vocab_size));
    }
  }
  c.tied_embeddings = file.FindTensor("output.weight") == nullptr;

  LayerSpec layer;
  WEFT_ASSIGN_OR_RETURN(layer.rope, ReadRope(file, p));
  layer.rope.freq_factors = traits->rope_freqs && file.FindTensor("rope_freqs.weight") != nullptr;
  layer.qkv_bias = traits->qkv_bias;
  layer.qk_norm = traits->qk_norm;
  layer.post_attention_norm = traits->post_norms;
  layer.post_ffn_norm = traits->post_norms;
  layer.activation = traits->activation;
  c.layers.assign(c.num_layers, layer);
  if (traits->gemma) WEFT_RETURN_IF_ERROR(ReadGemma(file, p, &c));
  WEFT_RETURN_IF_ERROR(c.Validate());
  WEFT_RETURN_IF_ERROR(CheckTensors(file, c));
  return c;
}

std::string ModelConfig::DebugString() const {
  int32_t local = 0;
  for (const LayerSpec& l : layers) local += l.sliding_window > 0 ? 1 : 0;
  const LayerSpec first = layers.empty() ? LayerSpec{} : layers[0];
  return absl::StrCat(
      architecture, "{layers=", num_layers, " hidden=", hidden_size, " ffn=", ffn_size,
      " heads=", num_heads, "/", num_kv_heads, " head_dim=", head_dim, " rope_dim=", rope_dim,
      rope_pairing == RopePairing::kAdjacent ? " rope=adjacent" : " rope=halves",
      " rope_base=", first.rope.freq_base, first.rope.freq_factors ? " rope_freqs" : "",
      " eps=", rms_norm_eps, " ctx=", context_length, " vocab=", vocab_size,
      tied_embeddings ? " tied" : "", first.qkv_bias ? " qkv_bias" : "",
      first.qk_norm ? " qk_norm" : "", first.post_ffn_norm ? " post_norms" : "",
      first.activation == FfnActivation::kGeluTanh ? " gelu_tanh" : " silu",
      local > 0 ? absl::StrCat(" sliding=", max_sliding_window(), "x", local) : "", "}");
}

}  // namespace weft

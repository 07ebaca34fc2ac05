// ModelConfig: the model description both processes read from a GGUF — its metadata and
// its tensor-info table, never its weights. The forward passes (CPU: worker/model,
// CUDA: worker/backends/cuda) follow it; an architecture is data here, not a copy of the
// forward pass. The scheduler reads it too, so a file the workers would refuse is refused
// before any port opens.
//
// Architectures (general.architecture) and what each one means per layer:
//   llama   RMSNorm -> attention -> + ; RMSNorm -> SwiGLU FFN -> + ; RoPE on adjacent
//           pairs (llama.cpp's NORM; the converter permutes Q/K rows); optional
//           rope_freqs.weight divides each pair's frequency (Llama 3.x "llama3" scaling).
//           Mistral and TinyLlama are llama files with other vocabularies.
//   qwen2   llama + biases on Q, K and V (attn_{q,k,v}.bias); RoPE on halves (NEOX).
//   qwen3   llama + RMSNorm of every Q and K head before RoPE (attn_{q,k}_norm.weight,
//           [head_dim]); RoPE on halves.
//   gemma3  embeddings scaled by sqrtf(hidden); QK norm; RMSNorm after the attention
//           output and after the FFN output too (post_attention_norm, post_ffw_norm),
//           before each residual add; GELU (tanh form) gated FFN; RoPE on halves;
//           sliding-window layers interleaved with global ones: with
//           gemma3.attention.sliding_window = W > 0, layer l is local when
//           l % P < P - 1 (P = gemma3.attention.sliding_window_pattern, default 6),
//           attends to keys (p - W, p] and rotates with rope.freq_base_swa (default
//           10000, scale 1); global layers use rope.freq_base and the file's scaling.
//           Attention scale 1/sqrt(head_dim) (1/sqrt(hidden/heads) for the 62-layer 27B),
//           as llama.cpp's src/models/gemma3.cpp. Gemma's RMSNorm is x̂ * (1 + w); llama.cpp's
//           converter stores 1 + w in the GGUF (its norm_shift), so every norm here is the
//           plain x̂ * w of the stored weight (checked on the real 270M file: q_norm ~ 1.97).
// Every norm is RMSNorm with the file's attention.layer_norm_rms_epsilon. RoPE scaling
// "none" and "linear" (angle * 1/rope.scaling.factor, as llama.cpp applies the factor)
// are supported; "yarn" and "longrope" are refused (Unimplemented). So is an
// architecture not listed, a missing tensor, a tensor of the wrong shape, and a tensor
// the description does not use (e.g. attn_output.bias): a file is served as llama.cpp
// computes it or not at all.
// Thread-safety: a value type.
#ifndef WEFT_COMMON_MODEL_CONFIG_H_
#define WEFT_COMMON_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/gguf.h"

namespace weft {

// Which dimensions of a head RoPE rotates together.
enum class RopePairing {
  kAdjacent,  // (x[2i], x[2i+1]): llama.cpp's LLAMA_ROPE_TYPE_NORM (arch llama)
  kHalves,    // (x[i], x[i + rope_dim/2]): LLAMA_ROPE_TYPE_NEOX (qwen2, qwen3, gemma3)
};

enum class FfnActivation {
  kSilu,      // silu(gate) * up
  kGeluTanh,  // gelu_tanh(gate) * up, gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi)(g + 0.044715 g^3)))
};

// The rotation of one layer: angle(p, i) = p * freq_scale * base^(-2i/rope_dim) / factor[i]
// (factor[i] = rope_freqs.weight[i] when freq_factors, else 1).
struct RopeSpec {
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  bool freq_factors = false;

  bool operator==(const RopeSpec& o) const {
    return freq_base == o.freq_base && freq_scale == o.freq_scale &&
           freq_factors == o.freq_factors;
  }
};

// One layer of the description.
struct LayerSpec {
  int32_t sliding_window = 0;  // 0: global attention; W > 0: keys (p - W, p] only
  RopeSpec rope;
  bool qkv_bias = false;             // attn_{q,k,v}.bias added after the projections
  bool qk_norm = false;              // attn_{q,k}_norm.weight on each head before RoPE
  bool post_attention_norm = false;  // RMSNorm of the attention output before its add
  bool post_ffn_norm = false;        // RMSNorm of the FFN output before its add
  FfnActivation activation = FfnActivation::kSilu;
};

// A tensor the description reads: its name and ggml shape (ne[0] = row length).
struct TensorSpec {
  std::string name;
  std::vector<int64_t> ne;
};

struct ModelConfig {
  std::string architecture;
  int32_t num_layers = 0;
  int32_t hidden_size = 0;  // embedding_length
  int32_t ffn_size = 0;     // feed_forward_length
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t rope_dim = 0;  // leading dims of each head that RoPE rotates
  RopePairing rope_pairing = RopePairing::kAdjacent;
  float rms_norm_eps = 1e-5f;
  float attention_scale = 0.0f;      // softmax(q.k * attention_scale)
  float embedding_scale = 1.0f;      // token embeddings are multiplied by it
  float final_logit_softcap = 0.0f;  // > 0: logits = c * tanh(logits / c)
  int32_t context_length = 0;
  int32_t vocab_size = 0;
  bool tied_embeddings = false;  // no output.weight: the LM head is token_embd.weight
  std::vector<LayerSpec> layers;  // num_layers entries

  int32_t queries_per_kv_head() const { return num_heads / num_kv_heads; }
  // The largest sliding window of any layer (0 when every layer is global).
  int32_t max_sliding_window() const;

  // Checks every field and their relations (positive sizes, heads divisible by KV heads,
  // even RoPE dimension no larger than head_dim, one LayerSpec per layer, ...).
  absl::Status Validate() const;

  // Every tensor the description reads, in load order, with its shape.
  std::vector<TensorSpec> Tensors() const;

  // Reads the description of a GGUF and checks its tensor table against Tensors():
  // Unimplemented for an architecture or RoPE scaling not listed above, naming it;
  // InvalidArgument for a missing or malformed key, or a tensor missing, of another
  // shape or not used by the architecture, naming it.
  static absl::StatusOr<ModelConfig> FromGguf(const GgufFile& file);

  std::string DebugString() const;
};

// The architectures FromGguf accepts, for messages and the README.
std::vector<std::string> SupportedArchitectures();

}  // namespace weft

#endif  // WEFT_COMMON_MODEL_CONFIG_H_

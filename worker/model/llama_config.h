// LlamaConfig: the hyperparameters of a Llama-family model, read from GGUF metadata.
//
// Keys (prefix "llama."): block_count, embedding_length, feed_forward_length,
// attention.head_count, attention.head_count_kv (default: head_count),
// attention.key_length (default: embedding_length / head_count),
// rope.dimension_count (default: head_dim), rope.freq_base (default 10000),
// attention.layer_norm_rms_epsilon, context_length. The vocabulary size is the row count
// of token_embd.weight (cross-checked against llama.vocab_size when present). Rope
// scaling other than "none" is rejected (Unimplemented) rather than silently ignored.
// Thread-safety: a value type.
#ifndef WEFT_WORKER_MODEL_LLAMA_CONFIG_H_
#define WEFT_WORKER_MODEL_LLAMA_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/gguf.h"
#include "kernels/cpu/rope.h"

namespace weft {

struct LlamaConfig {
  int32_t num_layers = 0;
  int32_t hidden_size = 0;      // embedding_length
  int32_t ffn_size = 0;         // feed_forward_length
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t rope_dim = 0;         // leading dims of each head that RoPE rotates
  float rope_freq_base = 10000.0f;
  kernels::RopeStyle rope_style = kernels::RopeStyle::kNormal;  // arch llama: adjacent pairs
  float rms_norm_eps = 1e-5f;
  int32_t context_length = 0;
  int32_t vocab_size = 0;
  bool tied_embeddings = false;  // no output.weight: the LM head is token_embd.weight

  int32_t queries_per_kv_head() const { return num_heads / num_kv_heads; }

  // Checks every field and their relations (positive sizes, heads divisible by KV heads,
  // even RoPE dimension no larger than head_dim, ...).
  absl::Status Validate() const;

  // Reads and validates the config of a llama-architecture GGUF. InvalidArgument for a
  // missing key or tensor, naming it; Unimplemented for another architecture.
  static absl::StatusOr<LlamaConfig> FromGguf(const GgufFile& file);

  std::string DebugString() const;
};

}  // namespace weft

#endif  // WEFT_WORKER_MODEL_LLAMA_CONFIG_H_

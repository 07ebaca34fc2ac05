// LlamaWeights: a Llama model's tensors as used by the forward pass, for one
// tensor-parallel rank.
//
// Matrices stay in the mmap'd GGUF (Linear, dequantized on the fly, or repacked for the
// kernels); every tensor in its own type: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q4_K, Q5_K, Q6_K, mixed within a file (another type is refused at load with an error
// naming the tensor and the type); norm vectors are copied to fp32. The LM head is output.weight,
// or token_embd.weight when the file has none (tied embeddings).
//
// ShardSpec says which slice a rank holds: common/shard_layout.h's ShardLayout (the same
// function the scheduler checks hellos with: KV heads split with the remainder going to
// the lower ranks, each rank taking the query heads that share its KV heads; FFN
// columns split in units of 32, vocabulary rows in units of 16). A rank holds rows
// [head_begin*D, head_end*D) of Q, its KV heads' rows of K and V, the matching input
// columns of O, FFN rows [ff_begin, ff_end) of gate/up and those input columns of down,
// and vocabulary rows [vocab_begin, vocab_end) of the LM head (vocab-parallel); the
// embedding table and the norms are replicated. Partial outputs of O and down are summed
// over ranks and the logits gathered (LlamaModel's AllReducer hook).
//
// Ownership: borrows the GgufFile, which must outlive the weights.
// Thread-safety: immutable after Load.
#ifndef WEFT_WORKER_MODEL_LLAMA_WEIGHTS_H_
#define WEFT_WORKER_MODEL_LLAMA_WEIGHTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf.h"
#include "common/shard_layout.h"
#include "worker/model/linear.h"
#include "worker/model/llama_config.h"

namespace weft {

struct ShardSpec : ShardLayout {
  // InvalidArgument if the model cannot be split that way (more ranks than KV heads, an
  // FFN width that is not a multiple of 32 with world_size > 1, head_dim slices that cut
  // a quantization block).
  static absl::StatusOr<ShardSpec> Compute(const LlamaConfig& config, int32_t world_size,
                                           int32_t rank);
};

struct LlamaLayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  Linear wq;                     // hidden -> num_heads * head_dim (this rank's)
  Linear wk;                     // hidden -> num_kv_heads * head_dim
  Linear wv;                     // hidden -> num_kv_heads * head_dim
  Linear wo;                     // num_heads * head_dim -> hidden (partial sum under TP)
  std::vector<float> ffn_norm;   // [hidden]
  Linear w_gate;                 // hidden -> ffn (this rank's columns)
  Linear w_up;                   // hidden -> ffn
  Linear w_down;                 // ffn -> hidden (partial sum under TP)
};

class LlamaWeights {
 public:
  static absl::StatusOr<LlamaWeights> Load(const GgufFile& file, const LlamaConfig& config,
                                           const ShardSpec& shard, KernelChoice kernels);

  const LlamaConfig& config() const { return config_; }
  const ShardSpec& shard() const { return shard_; }
  const std::vector<LlamaLayerWeights>& layers() const { return layers_; }
  const std::vector<float>& output_norm() const { return output_norm_; }
  // This rank's vocabulary rows [shard().vocab_begin, shard().vocab_end) of the LM head.
  const Linear& lm_head() const { return lm_head_; }

  // Writes the exact (dequantized) embedding of `token` (0 <= token < vocab) to out.
  void Embed(int32_t token, float* out) const;

 private:
  LlamaConfig config_;
  ShardSpec shard_;
  const GgufTensor* token_embd_ = nullptr;
  int64_t embd_row_bytes_ = 0;
  std::vector<float> output_norm_;
  Linear lm_head_;
  std::vector<LlamaLayerWeights> layers_;
};

}  // namespace weft

#endif  // WEFT_WORKER_MODEL_LLAMA_WEIGHTS_H_

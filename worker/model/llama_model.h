// LlamaModel: the forward pass on CPU of every architecture common/model_config.h
// describes (Llama, Qwen 2/3, Gemma 3), over a flattened batch with a paged KV cache
// (Orca-style selective batching). The ModelConfig is data the pass follows; there is
// one pass, not one per architecture.
//
// One Forward() call runs every scheduled sequence at once: token-wise work
// (embedding, RMSNorm, the Q/K/V/O and FFN projections, the gated activation, the LM
// head) runs over all tokens of the batch together; attention runs per sequence (and per
// KV head) through its block table, with the paged decode kernel for one-token chunks and
// the paged prefill kernel otherwise. x = embedding * embedding_scale; per layer l (the
// bracketed steps where LayerSpec l asks for them):
//   h = RMSNorm(x); q,k,v = h Wq [+ bq], h Wk [+ bk], h Wv [+ bv];
//   [q, k = RMSNorm of each head (QK norm)]; RoPE(q, k) with layer l's RopeSpec;
//   write k, v to the cache; a = attention(q, cache) over all keys or layer l's sliding
//   window, scale attention_scale; o = AllReduce(a Wo); [o = RMSNorm(o)]; x += o;
//   h = RMSNorm(x); f = AllReduce((act(h Wgate) * h Wup) Wdown), act = SiLU or
//   GELU-tanh; [f = RMSNorm(f)]; x += f
// then logits = RMSNorm(x_last) Wlm for the sequences that asked for them,
// [soft-capped: c * tanh(logits / c)].
//
// Guarantees:
//   * Batch invariance: a sequence's logits are bitwise the same whatever else is in
//     the batch and however threads split the work (every output is computed by a
//     fixed arithmetic sequence; see the kernels' headers).
//   * Chunking invariance: the same bits whether a prompt is prefilled at once or in
//     chunks (decode and prefill attention share their per-row arithmetic).
//   * Only the KV slots named by the batch's block tables are written; only slots of
//     positions < start_pos + chunk length are read.
//   * No heap allocation per step once the workspace has grown to the largest batch.
// Extension points: kernels per weight (Linear, KernelChoice), tensor parallelism
// (ShardSpec + an AllReducer; none for TP = 1), other backends (ForwardBatch is
// backend-neutral).
//
// Ownership: borrows the GgufFile (must outlive the model); owns its weights view, its
// workspace and a ThreadPool of options.num_threads threads (the caller's thread is one).
// Thread-safety: Forward() from one thread at a time (the rank's step thread).
#ifndef WEFT_WORKER_MODEL_LLAMA_MODEL_H_
#define WEFT_WORKER_MODEL_LLAMA_MODEL_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/gguf.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "worker/kv_cache.h"
#include "worker/model/all_reducer.h"
#include "worker/model/forward_batch.h"
#include "worker/model/linear.h"
#include "common/model_config.h"
#include "worker/model/llama_weights.h"
#include "worker/thread_pool.h"

namespace weft {

struct LlamaModelOptions {
  int32_t num_threads = 2;
  // Matmul and attention kernels. kReference is the fp32 reference path the accuracy
  // tests use; kAuto picks the fastest this CPU has.
  KernelChoice kernels = KernelChoice::kAuto;
  // Element type of the KV cache the model writes and reads (KvOptions()).
  KvDtype kv_dtype = kDefaultKvDtype;
  // Tensor-parallel hook: null for TP = 1; otherwise this rank's group (rank and world
  // size come from it), not owned, must outlive the model.
  AllReducer* all_reducer = nullptr;

  absl::Status Validate() const;
};

class LlamaModel {
 public:
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Create(const GgufFile& file,
                                                            const LlamaModelOptions& options);
  ~LlamaModel();
  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;

  const ModelConfig& config() const { return weights_.config(); }
  const ShardSpec& shard() const { return weights_.shard(); }
  const LlamaModelOptions& options() const { return options_; }
  const LlamaWeights& weights() const { return weights_; }

  // KV cache options for this rank's shard (options().kv_dtype elements).
  KvPoolOptions KvOptions(int32_t block_size, int32_t num_blocks) const;
  // The attention kernel Forward() uses with a cache of this block size.
  absl::StatusOr<kernels::AttentionImpl> AttentionImplFor(int32_t block_size) const;

  // Runs one forward pass: writes the chunks' K/V into `cache` and fills `out` with the
  // logits of the sequences that want them. InvalidArgument for a malformed batch (bad
  // token id, block table too short or out of range, position past the context
  // length), detected before anything is written; FailedPrecondition for a cache whose
  // shape does not match KvOptions(); the all-reducer's error under TP.
  absl::Status Forward(const ForwardBatch& batch, KvCache* cache, ForwardOutput* out);

 private:
  struct Workspace;
  struct AttentionItem;

  LlamaModel(const LlamaModelOptions& options, LlamaWeights weights);

  absl::Status ValidateBatch(const ForwardBatch& batch, const KvCache& cache) const;
  void PrepareBatch(const ForwardBatch& batch, int32_t block_size);
  void SplitSmallAttention();
  void Embed();
  absl::Status RunLayer(int32_t layer, kernels::AttentionImpl attn, KvCache* cache);
  void QkvRopeAndWrite(int32_t layer, const LlamaLayerWeights& w,
                       const kernels::PagedKvLayer& kv);
  void Attention(kernels::AttentionImpl impl, const kernels::PagedKvLayer& kv, int32_t window);
  // proj = in W (all-reduced under TP); x += proj (after RMSNorm with post_norm, when not
  // empty) happens in the next token-wise pass.
  absl::Status ProjectAndAdd(const Linear& w, const LinearInput& in,
                             const std::vector<float>& post_norm);
  // x += proj (post-normed if pending) for tokens [begin, end).
  void AddResidual(int64_t token_begin, int64_t token_end);
  // RMSNorm of the residual stream into h (and its rounded forms the kernels want).
  void NormAndQuantize(const std::vector<float>& norm);
  // The rounded forms of the first num_tokens rows of x into *out (if any are wanted).
  void QuantizeRows(const float* x, int64_t ldx, ActivationBuffer* out);
  void GateUp(const LlamaLayerWeights& w, FfnActivation activation);
  absl::Status Logits(ForwardOutput* out);
  // TP: every rank's slice of the logits of `rows` rows into `logits` (rows x vocab).
  absl::Status GatherLogits(int64_t rows, const float* local, float* logits);
  // Runs fn(begin, end) over token ranges: inline for a few tokens, else on the pool.
  void ForTokens(absl::FunctionRef<void(int64_t, int64_t)> fn);

  const LlamaModelOptions options_;
  const LlamaWeights weights_;
  ThreadPool pool_;
  std::unique_ptr<Workspace> ws_;
  InputForms forms_;       // the rounded activation forms some layer matmul wants
  InputForms head_forms_;  // those the LM head wants
  kernels::ElementwiseImpl elementwise_ = kernels::ElementwiseImpl::kReference;
  kernels::RopeStyle rope_style_ = kernels::RopeStyle::kNormal;
  // The distinct RoPEs of the layers (Gemma 3: local and global) as inverse frequencies
  // (kernels/cpu/rope.h), and which one each layer uses.
  std::vector<std::vector<double>> rope_inv_freq_;
  std::vector<int32_t> layer_rope_;
  // TP: every rank's vocabulary rows [begin, end), in rank order.
  std::vector<std::pair<int64_t, int64_t>> vocab_slices_;
};

}  // namespace weft

#endif  // WEFT_WORKER_MODEL_LLAMA_MODEL_H_

// ModelRunner: queues one forward pass on a CUDA stream — the kernel sequence of the
// CUDA backend, with no host synchronization inside, so that a whole decode step can be
// captured into a CUDA graph, or each piece between two attentions of any step ("Pieces"
// below). It follows the model description (common/model_config.h)
// as LlamaModel does on the CPU: one sequence of kernels, the bracketed ones launched
// where layer l's LayerSpec asks for them.
//
// Per step (T tokens, R logits rows; the index arrays come from a StepInputs blob
// already on the device):
//   x = Embed(token_ids) [* embedding_scale]                           fp32 [T][hidden]
//   per layer l:
//     h   = RMSNorm(x (+ pending delta [post-normed]))                 bf16 [T][hidden]
//     qkv = h Wqkv^T [+ bias]          (cuBLAS, or the GEMV when T <= 4) fp32 [T][q+2kv]
//                                      (or QuantGemm when T <= quant_gemm_max_rows)
//     [QK norm: RMSNorm of every q and k head in place]
//     RoPE(q, k) with layer l's RoPE + WritePagedKv(k, v -> slots)   (one fused kernel)
//     attn = decode kernel (1-token chunks) + prefill kernel (tiles), over all keys or
//            layer l's sliding window, scale attention_scale        bf16 [T][q]
//     x += attn Wo^T        (GEMM epilogue beta = 1: the residual add is fused into the
//                            projection; under TP or with a post-norm: proj, [all-reduce],
//                            [RMSNorm'd and] added by the next RMSNorm)
//     h = RMSNorm(x);  act = SiLU or GELU-tanh(h Wgate) * h Wup       bf16 [T][ffn]
//                           (SiLU on the GEMV path: one fused kernel; otherwise GEMM +
//                            SwiGlu / GeGlu)
//     x += act Wdown^T      (as for Wo)
//   logits = RMSNorm(x[logit rows]) Wlm^T [soft-capped]                 fp32 [R][vocab]
// Pieces: the sequence above is cut at attention into num_layers + 1 pieces — piece 0:
// embedding + layer 0 up to attention (norm, qkv, [bias, QK norm], RoPE + KV write);
// piece l (1 <= l < L): layer l-1 after attention (o, norm, gate/up + act, down) + layer l
// up to attention; piece L: layer L-1 after attention + the final norm + the logits rows.
// One Enqueue queues all of them: eagerly (no PieceHook), inside one capture (the
// backend's decode graphs: attention captured too), or through a PieceHook that captures
// each piece once per token bucket and replays it, attention launched eagerly between the
// pieces (piecewise graphs: attention's grids follow the step's chunks). No host state
// crosses a piece boundary, so a replayed piece may follow a captured one.
// Kernels per step of a llama-architecture model, TP = 1, every linear on the GEMV path
// (T <= gemv_max_rows and quantized weights) and the decode kernel's splits combined
// in-kernel (kPipelined) — other architectures add their bracketed kernels:
//   fused (default):  1 + 8 * num_layers + 2   (norm, qkv, rope+kv, attn, o, norm,
//                                               gate_up+swiglu, down; embed; norm, head)
//   fused = false, kSplitV1 with several splits: 1 + 11 * num_layers + 2 (rope, kv write,
//                                               reduction and swiglu separate)
//   fused + norm_gemv:  1 + 6 * num_layers + 2  (the two norms of a layer folded into
//                                               the qkv and gate_up GEMVs; RunnerOptions)
//   fused + rope_gemv:  1 + 7 * num_layers + 2  (rope+kv in the qkv GEMV's epilogue)
//   fused + both:       1 + 5 * num_layers + 2  (qkv, attn, o, gate_up, down)
// A prefill chunk in the batch adds the prefill kernel per layer; cuBLAS GEMMs (larger T
// or dense weights) may launch more than one kernel each. On piecewise graphs a step is
// L + 1 graph launches and, per layer, its attention launches (decode kernel [+ kSplitV1's
// reduction], CUDA-core prefill, tensor-core prefill: those the chunks need).
// Activation buffers grow on demand (Reserve) and are never shrunk; a CUDA graph that
// captured the old addresses must then be dropped (Reserve reports it). The attention
// output buffer is zeroed when allocated (padding tokens' rows are never written).
//
// Ownership: borrows the weights, the KV cache, the cuBLAS handle and the communicator
// (which must outlive it); owns the activation buffers.
// Thread-safety: the rank's step thread only.
#ifndef WEFT_WORKER_BACKENDS_CUDA_MODEL_RUNNER_H_
#define WEFT_WORKER_BACKENDS_CUDA_MODEL_RUNNER_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/quant.h"
#include "worker/backends/cuda/device_buffer.h"
#include "worker/backends/cuda/device_kv_cache.h"
#include "worker/backends/cuda/device_weights.h"
#include "worker/backends/cuda/step_inputs.h"
#include "worker/comm/nccl_communicator.h"
#include "common/model_config.h"
#include "worker/model/llama_weights.h"

namespace weft::cuda_backend {

struct RunnerOptions {
  // Rows at most for which the fused dequantizing GEMV replaces cuBLAS (0: never).
  int32_t gemv_max_rows = 4;
  // Rows at most for which the fused dequantize + tensor-core GEMM (quant_gemm.h) replaces
  // cuBLAS above gemv_max_rows (0: never).
  int32_t quant_gemm_max_rows = 0;
  int32_t num_sms = 132;
  // Fused decode kernels (RoPE + KV write; gate/up GEMV + SwiGLU). false: the separate
  // kernels, kept for A/B runs.
  bool fused = true;
  // A layer's RMSNorms folded into the GEMV after them (kernels/cuda/quant.h,
  // QuantGemvNormed): where a step takes the GEMV path, x holds the residual stream (no
  // delta pending: TP = 1, no post-norm) and the rows fit the kernel's shared memory
  // (GemvNormFits). The same bits as the separate RmsNorm + GEMV.
  bool norm_gemv = false;
  // RoPE + the KV write as the QKV GEMV's epilogue (kernels/cuda/quant.h,
  // QuantGemvRopeKv) where a step takes the one-part GEMV path and the layer has no
  // bias, no QK norm and adjacent RoPE pairs (FoldsRopeKv). The same bits.
  bool rope_gemv = false;
  // Every kernel of Enqueue that supports it launched with programmatic dependent launch
  // (kernels/cuda/launch.h); the caller checked the device (compute capability 9.0+).
  bool programmatic_launch = false;
  kernels::cuda::DecodeKernel decode_kernel = kernels::cuda::DecodeKernel::kPipelined;
};

// Where a step's inputs are and how attention splits its decode work.
struct StepArgs {
  const uint8_t* meta = nullptr;  // device copy of the StepInputs blob
  // The block tables the offsets index: the device's persistent ones (StepInputs' StepBatch
  // form), or null for the blob's own (layout.tables).
  const int32_t* tables = nullptr;
  StepLayout layout;
  StepShape shape;
  int32_t decode_partition = 512;
  int32_t decode_max_splits = 1;
};

// Queues the pieces of a forward pass (see "Pieces" above) for ModelRunner::Enqueue.
class PieceHook {
 public:
  virtual ~PieceHook() = default;
  // Piece `index` of `count`: `queue` queues its kernels on the step's stream; the hook
  // calls it (e.g. under stream capture, then launches the graph) or replays what an
  // earlier call captured for the same piece, bucket and step layout.
  virtual absl::Status Run(int32_t index, int32_t count,
                           absl::FunctionRef<absl::Status()> queue) = 0;
};

class ModelRunner {
 public:
  ModelRunner(const ModelConfig& config, const ShardSpec& shard, const DeviceWeights* weights,
              DeviceKvCache* kv, cublasHandle_t cublas, const RunnerOptions& options);

  // Uploads the RoPE frequencies (one table per distinct RoPE of the layers) and gives
  // cuBLAS a fixed workspace (graph capture must not allocate; set again with the stream
  // at every Enqueue, as cublasSetStream drops it).
  absl::Status Init(cudaStream_t stream);

  // Which buffers an existing allocation of moved (graphs that captured them are stale):
  // the activations (every graph captures them), attention's own (decode workspace and
  // split counters: only decode graphs capture attention).
  struct ReserveMoves {
    bool activations = false;
    bool attention = false;
  };
  // Makes the buffers big enough for `tokens` tokens, `rows` logits rows and a decode
  // workspace of `decode_ws_floats`; *moves says what moved (set, never cleared). The
  // decode kernel's split counters (their own buffer, one per (decode item, KV head) for
  // up to `tokens` items) are zeroed on `stream` when allocated; the kernel keeps them
  // zero between launches, whatever the plan (kernels/cuda/paged_attention.h).
  absl::Status Reserve(int32_t tokens, int32_t rows, int64_t decode_ws_floats,
                       ReserveMoves* moves, cudaStream_t stream);

  // Queues the forward pass (see above). `comm` is null for TP = 1. `pieces`, if set,
  // queues every piece (attention is launched here, between them).
  absl::Status Enqueue(const StepArgs& step, NcclCommunicator* comm, cudaStream_t stream,
                       PieceHook* pieces = nullptr);

  // Logits of the last Enqueue: rows of vocab_size fp32.
  const float* logits() const { return logits_.as<float>(); }

 private:
  // cublasSetStream(stream), then the fixed workspace again.
  absl::Status BindCublas(cudaStream_t stream);
  absl::Status Linear(const DeviceLinear& w, const void* x, int64_t ldx, int32_t m, float* y,
                      int64_t ldy, bool accumulate);
  // The pieces' parts: layer l's kernels before / after its attention, and the logits.
  absl::Status BeforeAttention(const StepArgs& step, int32_t layer, cudaStream_t stream);
  absl::Status AfterAttention(const StepArgs& step, int32_t layer, NcclCommunicator* comm,
                              cudaStream_t stream);
  absl::Status Logits(const StepArgs& step, cudaStream_t stream);
  // Layer l's attention: the decode kernel over the 1-token chunks, the prefill kernels
  // over the tiles (the one place attention is launched, in every mode).
  absl::Status Attention(const StepArgs& step, int32_t layer, cudaStream_t stream);
  // RoPE on q and k, K/V into the cache (fused or as two kernels, per options_.fused).
  absl::Status RopeAndKv(const StepArgs& step, int32_t layer, cudaStream_t stream);
  // act = act(h Wgate) * h Wup: the fused SwiGLU GEMV when it applies, else GEMM + the
  // layer's activation kernel.
  // norm set: the GEMV reads RMSNorm(x) with it instead of h (FoldsNorm holds).
  absl::Status GateUpAct(const DeviceLinear& w, FfnActivation activation, int32_t tokens,
                         const kernels::cuda::GemvNorm* norm, cudaStream_t stream);
  // Whether the RMSNorm of x before `w` folds into w's GEMV for a step of `tokens` rows
  // (RunnerOptions::norm_gemv's conditions).
  bool FoldsNorm(const DeviceLinear& w, int32_t tokens) const;
  // Layer l's RoPE + KV write for this step's tokens over the QKV buffer.
  kernels::cuda::RopeKvArgs RopeArgs(const StepArgs& step, int32_t layer) const;
  // Whether layer l's RoPE + KV write folds into its QKV GEMV for a step of `tokens` rows.
  bool FoldsRopeKv(int32_t layer, int32_t tokens) const;
  // The residual stream x RMS-normalized with `weight`, as a normed GEMV's input.
  kernels::cuda::GemvNorm ResidualNorm(const float* weight) const;
  // y = RMSNorm(x) W^T through the normed GEMV, one launch per GEMV part.
  absl::Status NormedGemv(const kernels::cuda::GemvNorm& norm, const DeviceLinear& w,
                          int32_t tokens, float* y, int64_t ldy, cudaStream_t stream);
  // Bias, QK norm (where the layer has them) on the QKV GEMM output.
  absl::Status QkvExtras(int32_t layer, int32_t tokens, cudaStream_t stream);
  // out-projection of a layer: x += in W^T (TP or a post-norm: proj = in W^T,
  // all-reduced, left for the next Norm to add, post-normed with `post_norm` if set).
  absl::Status Project(const DeviceLinear& w, const void* in, int64_t ld_in, int32_t tokens,
                       const float* post_norm, NcclCommunicator* comm, cudaStream_t stream);
  absl::Status Norm(const float* weight, int32_t tokens, const int32_t* rows, cudaStream_t stream);

  const ModelConfig config_;
  const ShardSpec shard_;
  const DeviceWeights* const weights_;
  DeviceKvCache* const kv_;
  const cublasHandle_t cublas_;
  const RunnerOptions options_;
  const int64_t q_width_, kv_width_, qkv_width_, ffn_;

  bool pending_delta_ = false;  // proj_ holds a (reduced) sum not yet added to x_,
  const float* pending_delta_norm_ = nullptr;  // RMSNorm'd with this weight first if set
  bool post_norms_ = false;                    // some layer has post-norms: proj_ needed
  std::vector<DeviceBuffer> inv_freq_;         // per distinct RoPE: double [rope_dim / 2]
  std::vector<int32_t> layer_rope_;            // layer -> its table in inv_freq_
  DeviceBuffer cublas_ws_;
  DeviceBuffer quant_gemm_partials_;  // QuantGemm's split-K scratch (fixed size, Init)
  DeviceBuffer x_, h_, qkv_, attn_, gu_, act_, proj_, logits_, decode_ws_;
  DeviceBuffer split_counters_;  // int32 [item][KV head], zero between launches
};

}  // namespace weft::cuda_backend

#endif  // WEFT_WORKER_BACKENDS_CUDA_MODEL_RUNNER_H_

// CudaBackend: the Backend of a worker rank on one NVIDIA GPU (built with --config=cuda).
//
// Holds this rank's shard of the model on the device (DeviceWeights: bf16 matrices
// dequantized at load, plus quantized copies for the small-batch GEMV), a paged KV cache
// in device memory (DeviceKvCache: fp16, bf16 or int8 groups) and a ModelRunner that
// queues the forward pass. A step: validate and flatten the batch on the host
// (StepInputs), one host-to-device copy of the index arrays, the forward pass on the
// backend's stream, one device-to-host copy of the logits rows, one synchronization.
//
// CUDA graphs (TP = 1; ChooseStepGraph in step_inputs.h picks, GraphCache holds them):
// * decode graphs: a step whose chunks are all single decode tokens (at most
//   max_graph_batch of them) runs as one CUDA graph captured once per batch-size bucket
//   (1, 2, 4, ..., max_graph_batch; the batch is padded to its bucket, see StepInputs)
//   and context bucket (the next power of two >= the longest context, at least 1024: the
//   decode kernel's split count and workspace follow it), attention included.
// * piecewise graphs (graph_mixed_steps, on by default since the H200 A/B of
//   2026-11-28): every other step of at most max_graph_tokens tokens — mixed prefill +
//   decode, prefill-only, decode batches over max_graph_batch — is padded to its token
//   bucket (16, 32, ..., max_graph_tokens; padding tokens write no KV and attend to
//   nothing) and its logits rows to theirs (1, 2, 4, ...; see StepInputs), and runs as
//   num_layers + 1 graphs, one per piece of the forward between two attentions
//   (model_runner.h "Pieces": the embedding, norms, GEMMs — cuBLAS at the padded T, on
//   the fixed workspace —, RoPE + KV write, the FFN, the final norm and the LM head),
//   each captured once per token bucket (the last also per row bucket) and replayed;
//   attention runs eagerly between them, its grids and split plan from this step's real
//   chunks and contexts.
// * everything else runs eagerly. A graph is captured on the first step of its key and
//   replayed after; graphs are dropped when a buffer they captured has to grow (an
//   activation buffer: all of them; the decode workspace, split counters or persistent
//   block tables: the decode graphs; the piecewise steps' input blob: the pieces).
// Coverage: graph_steps() counts the forward passes of each kind (the worker exports
// weft_worker_graph_steps_total{kind="decode_graph"|"piecewise"|"eager"}).
//
// Tensor parallelism: world_size > 1 shards the weights as the CPU backend does
// (ShardSpec); the row-parallel projections are all-reduced with NCCL on the compute
// stream. Rank 0's CommInit() is a fresh NCCL unique id (sent in the hello); JoinGroup
// forms the group from the id the scheduler relays in the Welcome (every attachment).
// The step's final synchronization polls the communicator's deadline, so a dead peer
// fails the step (and the group, until the next Welcome) instead of hanging it.
//
// Numerics (the backend's documented tolerance, Backend contract): bf16 weights and GEMM
// inputs with fp32 accumulation, fp32 residual stream, norms, RoPE and softmax; results
// are deterministic for a given batch shape and GPU, and a sequence's logits agree with
// the CPU backend and across batch compositions to bf16 rounding (not bitwise).
// Copy-on-write copies are queued by CopyBlock and run as one kernel before the next
// forward pass (or at the next JoinGroup, i.e. a new attachment) on the same stream.
// Step (cuda_step.cc): the logits stay on the device for every row. One step queues, on
// the backend's stream: the StepInputs blob (StepBatch form) and one blob of the step's
// state diff and sampling inputs (two host-to-device copies), the block-table diff into
// the persistent tables and the count-row diff (SequenceSlots), the forward pass (a decode
// graph, piecewise graphs or eager: "CUDA graphs" above), device sampling of every sampled row (every config the
// host Sampler takes: temperature, top-k/p, min-p, penalties from device-resident count
// rows, seeds, the grammar mask), logprobs of the rows that ask (the chosen token's and
// the top N, rows x N), then one device-to-host copy of the tokens and logprobs and one
// synchronization. device_sampling = false: ForwardStepper over Forward (rows x vocab
// logits to the host, the host Sampler).
//
// Ownership: owns its device memory, stream, cuBLAS handle and communicator; borrows
// the GgufFile only during Create. Thread-safety: as Backend (one step thread).
#ifndef WEFT_WORKER_BACKENDS_CUDA_CUDA_BACKEND_H_
#define WEFT_WORKER_BACKENDS_CUDA_CUDA_BACKEND_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/gguf.h"
#include "kernels/cuda/dtypes.h"
#include "kernels/cuda/paged_attention.h"
#include "worker/backends/backend.h"
#include "worker/backends/forward_stepper.h"
#include "worker/backends/cuda/device_buffer.h"
#include "worker/backends/cuda/device_kv_cache.h"
#include "worker/backends/cuda/device_weights.h"
#include "worker/backends/cuda/graph_cache.h"
#include "worker/backends/cuda/model_runner.h"
#include "worker/backends/cuda/sequence_slots.h"
#include "worker/backends/cuda/step_inputs.h"
#include "worker/comm/nccl_communicator.h"
#include "common/model_config.h"
#include "worker/model/llama_weights.h"

namespace weft {

struct CudaBackendOptions {
  int32_t rank = 0;
  int32_t world_size = 1;
  int32_t device = -1;  // CUDA device; -1: rank % device count
  int32_t block_size = 16;
  // KV pool size (SizeDeviceKvPool, worker/kv_pool.h): num_kv_blocks if > 0, else as
  // many blocks as kv_memory_bytes holds if > 0, else what gpu_memory_utilization of the
  // device leaves after the weights (and kActivationReserveBytes) — logged at Create.
  int32_t num_kv_blocks = 0;
  int64_t kv_memory_bytes = 0;
  double gpu_memory_utilization = 0.9;
  KvDtype kv_dtype = kDefaultKvDtype;  // f16, bf16 or int8
  bool cuda_graphs = true;
  int32_t max_graph_batch = 256;  // largest decode bucket (ValidateMaxGraphBatch)
  // Piecewise graphs for the other steps up to max_graph_tokens tokens (the largest token
  // bucket, ValidateMaxGraphTokens); WEFT_CUDA_KERNELS "mixed_graphs=0|1" overrides it.
  bool graph_mixed_steps = true;
  int32_t max_graph_tokens = 2048;
  int32_t gemv_max_rows = 4;      // fused dequantizing GEMV up to this many rows (0: off)
  // Fused dequantize + tensor-core GEMM (kernels/cuda/quant_gemm.h) for steps of more
  // rows than the GEMV takes, up to this many (0: off, cuBLAS on the bf16 copy; at most
  // 256). Off: on an H200 it tied cuBLAS on the default model (tools/bench/README.md).
  int32_t quant_gemm_max_rows = 0;
  bool device_sampling = true;    // sample on the device in Step (else the host Sampler)
  // Fused decode kernels (RoPE + KV write, gate/up GEMV + SwiGLU) and the decode attention
  // kernel; the alternatives stay for A/B runs (kernels/cuda/paged_attention.h). Until
  // weft-worker has flags for them, the environment variable WEFT_CUDA_KERNELS overrides
  // these three (and graph_mixed_steps, key mixed_graphs=0|1, quant_gemm_max_rows, key
  // qgemm, norm_gemv, key norm_gemv=0|1, rope_gemv, key rope_gemv=0|1, and
  // programmatic_launch, key pdl=0|1) at Create, e.g.
  // "decode=split_v1,fused=0,tc_prefill=0,qgemm=64" or "decode=grouped" (logged; a bad
  // value fails Create with InvalidArgument).
  bool fused_kernels = true;
  // A layer's two RMSNorms folded into the GEMVs after them on decode steps of <= 4 rows
  // (RunnerOptions::norm_gemv; key norm_gemv=0|1). Off until measured on a card: it takes
  // 2 of the 8 kernels a layer, but every GEMV block then re-reads the rows it normalizes.
  bool norm_gemv = false;
  // Programmatic dependent launch of the decode-path kernels (kernels/cuda/launch.h; key
  // pdl=0|1; compute capability 9.0+, else logged and off): a kernel's CTAs start while
  // the one before still runs, its GEMV weights already loading. Off until measured.
  bool programmatic_launch = false;
  // RoPE + KV write folded into the QKV GEMV on decode steps (RunnerOptions::rope_gemv;
  // key rope_gemv=0|1): one kernel a layer fewer. Off until measured on a card.
  bool rope_gemv = false;
  // Prefill chunks of >= kTensorCorePrefillMinTokens tokens on the tensor-core kernel.
  bool tensor_core_prefill = true;
  // Unset: DefaultDecodeKernel(the model's query heads per KV head).
  std::optional<kernels::cuda::DecodeKernel> decode_kernel;
  // Deadline of group formation and of each step's collectives (--collective_timeout_s).
  absl::Duration comm_timeout = absl::Seconds(10);

  absl::Status Validate() const;
};

// The decode attention kernel when the options name none: kGrouped for grouped-query
// attention (>= 2 query heads per KV head: each K/V tile converted once for the group;
// 1.2-2.5x kPipelined's bandwidth on the H200's GQA rows, tools/bench/README.md),
// kPipelined for multi-head attention (group 1, where kGrouped ran at 0.89x of it).
kernels::cuda::DecodeKernel DefaultDecodeKernel(int32_t queries_per_kv_head);

class CudaBackend : public Backend {
 public:
  // Loads this rank's shard onto the GPU and allocates the KV pool. FailedPrecondition
  // without a usable device; Unimplemented for a model the kernels do not cover
  // (head_dim other than 64/128, more than 32 query heads per KV head, a matrix type
  // other than F32/F16/BF16/Q4_0/Q4_1/Q8_0).
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const GgufFile& file,
                                                             const CudaBackendOptions& options);
  ~CudaBackend() override;

  const char* name() const override { return "cuda"; }
  std::string kernels() const override { return kernels_; }
  const ModelConfig& config() const override { return config_; }
  int32_t block_size() const override { return kv_->block_size(); }
  int32_t num_kv_blocks() const override { return kv_->num_blocks(); }
  int64_t kv_pool_bytes() const override { return kv_->pool_bytes(); }

  // See "Step" above (cuda_step.cc).
  absl::Status Step(const StepBatch& batch, StepOutput* out) override;
  absl::Status Forward(const ForwardBatch& batch, ForwardOutput* out) override;
  absl::Status CopyBlock(int32_t src, int32_t dst) override;
  std::string CommInit() override;
  absl::Status JoinGroup(absl::string_view replica, int64_t epoch,
                         absl::string_view comm_init) override;
  void LeaveGroup() override;
  int64_t device_to_host_bytes() const override { return d2h_bytes_; }
  int64_t host_to_device_bytes() const override { return h2d_bytes_; }

  GraphStepCounts graph_steps() const override {
    return {graph_replays_, piecewise_steps_, eager_steps_};
  }
  // Steps that ran as a decode-graph replay / decode graphs captured (for tests and logs).
  int64_t graph_replays() const { return graph_replays_; }
  int64_t graph_captures() const { return graph_captures_; }
  // Pieces of piecewise steps captured so far (num_layers + 1 for a new token bucket).
  int64_t piece_captures() const { return piece_captures_; }
  // Nodes (kernel launches) of the last captured decode graph: the launches per decode
  // step (see model_runner.h for the count).
  int64_t last_graph_nodes() const { return last_graph_nodes_; }

 private:
  explicit CudaBackend(const CudaBackendOptions& options) : options_(options) {}

  absl::Status Init(const GgufFile& file);
  // How this batch runs (graph_policy_'s choice).
  cuda_backend::StepGraph ChooseGraph(const ForwardBatch& batch) const;
  absl::Status FlushCopies();
  absl::Status Sync();
  void CopyLogits(ForwardOutput* out) const;
  // Uploads inputs_ (built for `graph`) and queues the forward pass; `tables`: the
  // persistent block tables (StepBatch form) or null (the blob's).
  absl::Status EnqueueForward(cuda_backend::StepGraph graph, const int32_t* tables);
  // The device buffer the step's blob goes to (graphs capture its address).
  absl::StatusOr<cuda_backend::DeviceBuffer*> MetaFor(cuda_backend::StepGraph graph,
                                                      size_t bytes);
  absl::Status RunDecodeGraph(const cuda_backend::StepArgs& args, int32_t bucket,
                              int32_t max_ctx);
  cuda_backend::StepGraph ChooseGraph(const StepBatch& batch) const;
  absl::Status DeviceStep(const StepBatch& batch, StepOutput* out);
  // Sizes the persistent tables and count rows for slots_ after its Update(batch); on
  // growth the device state restarts (slots_ cleared, the batch's diff recomputed).
  absl::Status ReserveState(const StepBatch& batch);
  // Packs the step's diff and sampling inputs into step_host_ (layout in step_layout_);
  // InvalidArgument for num_logprobs over the vocabulary.
  // The step's one upload and read-back area (blob_, step_host_): PackStep counts the
  // sampled rows, lays the regions out, then fills them.
  absl::Status PackStep(const StepBatch& batch);
  absl::Status CountSampleRows(const StepBatch& batch);
  void LayOutBlob();
  absl::Status FillSampleRows(const StepBatch& batch);
  absl::Status EnqueueSampling(const StepBatch& batch);
  absl::Status ReadSamples(const StepBatch& batch, StepOutput* out);

  const CudaBackendOptions options_;
  int32_t device_ = 0;
  int32_t num_sms_ = 0;
  ModelConfig config_;
  // options_.decode_kernel, else DefaultDecodeKernel for config_ (Init).
  kernels::cuda::DecodeKernel decode_kernel_ = kernels::cuda::DecodeKernel::kPipelined;
  // options_.programmatic_launch where the device has it (Init).
  bool programmatic_launch_ = false;
  ShardSpec shard_;
  std::string kernels_;
  cuda_backend::StepLimits limits_;
  cuda_backend::GraphPolicy graph_policy_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<cuda_backend::DeviceWeights> weights_;
  std::unique_ptr<cuda_backend::DeviceKvCache> kv_;
  std::unique_ptr<cuda_backend::ModelRunner> runner_;
  std::unique_ptr<NcclCommunicator> comm_;
  std::unique_ptr<ForwardStepper> stepper_;
  bool stream_dirty_ = false;  // a failed step may have left work queued

  cuda_backend::StepInputs inputs_;
  cuda_backend::PinnedBuffer meta_host_;
  cuda_backend::DeviceBuffer meta_eager_;
  cuda_backend::DeviceBuffer meta_graph_;   // decode graphs: sized for the largest bucket once
  cuda_backend::DeviceBuffer meta_pieces_;  // piecewise graphs: grown by doubling
  cuda_backend::PinnedBuffer logits_host_;
  cuda_backend::GraphCache graphs_;
  int64_t graph_replays_ = 0;
  int64_t graph_captures_ = 0;
  int64_t last_graph_nodes_ = 0;
  int64_t piecewise_steps_ = 0, piece_captures_ = 0, eager_steps_ = 0;

  std::vector<int32_t> pending_copies_;  // (src, dst) pairs queued by CopyBlock
  cuda_backend::PinnedBuffer copies_host_;
  cuda_backend::DeviceBuffer copies_dev_;

  // Device-resident per-sequence state (SequenceSlots): block tables [slots][max blocks]
  // and count rows [rows][vocab], grown by doubling.
  cuda_backend::SequenceSlots slots_{1};
  cuda_backend::DeviceBuffer tables_dev_;
  cuda_backend::DeviceBuffer counts_dev_;
  int32_t table_capacity_ = 0, count_capacity_ = 0;
  // The step blob: inputs up to `upload` bytes, then the outputs read back.
  struct StepBlob {
    size_t params = 0, logits_rows = 0, count_rows = 0, mask_index = 0, table_pairs = 0,
           zero_rows = 0, marks = 0, lp_rows = 0, lp_index = 0, lp_top = 0, masks = 0;
    size_t upload = 0;
    size_t tokens = 0, lp = 0, top_ids = 0, top_lp = 0;
    size_t total = 0;
    int32_t rows = 0, lp_count = 0, max_top = 0, num_masks = 0, num_pairs = 0,
            num_zero = 0, num_marks = 0;
  };
  StepBlob blob_;
  std::vector<int32_t> entry_row_;  // per batch entry: its sample row, or -1
  std::vector<int32_t> scratch_pairs_, scratch_marks_, own_row_;
  cuda_backend::PinnedBuffer step_host_;
  cuda_backend::DeviceBuffer step_dev_;
  cuda_backend::DeviceBuffer sample_work_;  // rows x vocab floats
  int64_t d2h_bytes_ = 0, h2d_bytes_ = 0;
};

}  // namespace weft

#endif  // WEFT_WORKER_BACKENDS_CUDA_CUDA_BACKEND_H_

#include "worker/backends/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/paged_kv.h"
#include "kernels/cuda/quant.h"
#include "kernels/cuda/quant_gemm.h"
#include "kernels/cuda/sampling.h"
#include "worker/backends/cuda_flags.h"
#include "worker/kv_pool.h"

namespace weft {
namespace {

namespace kc = ::weft::kernels::cuda;
static_assert(kc::kMaxQuantGemmRows == kMaxQuantGemmMaxRows,
              "--quant_gemm_max_rows's bound is what QuantGemm takes");
using cuda_backend::StepArgs;

// Device memory the pool leaves for what is allocated after it (the runner's activation
// buffers and workspaces, CUDA graphs' pools): counted out of --gpu_memory_utilization's
// share. An estimate for models of the default's size class; a larger model's
// activations at 256 rows stay well inside it plus the share's (1 - utilization).
constexpr int64_t kActivationReserveBytes = int64_t{512} << 20;

size_t Align16(size_t x) { return (x + 15) / 16 * 16; }

// Decode graphs are also keyed by a context bucket (its split count and workspace follow
// it): the next power of two >= the batch's longest context, at least 1024, at most the
// model's context length.
int32_t ContextBucket(int32_t max_context, int32_t context_length) {
  return std::min(context_length, std::max(1024, cuda_backend::PowerOfTwoBucket(max_context)));
}

}  // namespace

absl::Status CudaBackendOptions::Validate() const {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of world size ", world_size));
  }
  if (block_size < 1 || block_size > 1024) {
    return absl::InvalidArgumentError("block size must be in 1..1024");
  }
  if (num_kv_blocks < 0) return absl::InvalidArgumentError("--num_kv_blocks must be >= 0");
  if (kv_memory_bytes < 0) return absl::InvalidArgumentError("--kv_memory_bytes must be >= 0");
  WEFT_RETURN_IF_ERROR(ValidateGpuMemoryUtilization(gpu_memory_utilization));
  WEFT_RETURN_IF_ERROR(ValidateMaxGraphBatch(max_graph_batch));
  WEFT_RETURN_IF_ERROR(ValidateMaxGraphTokens(max_graph_tokens));
  WEFT_RETURN_IF_ERROR(ValidateQuantGemmMaxRows(quant_gemm_max_rows));
  if (gemv_max_rows < 0 || gemv_max_rows > kc::kMaxGemvRows) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemv_max_rows must be in [0, ", kc::kMaxGemvRows, "]"));
  }
  if (comm_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("comm_timeout must be > 0");
  }
  return absl::OkStatus();
}

namespace {

// The boolean option WEFT_CUDA_KERNELS names `key` (=0|1), or null.
bool* BoolKey(absl::string_view key, CudaBackendOptions* o) {
  if (key == "fused") return &o->fused_kernels;
  if (key == "norm_gemv") return &o->norm_gemv;
  if (key == "rope_gemv") return &o->rope_gemv;
  if (key == "pdl") return &o->programmatic_launch;
  if (key == "tc_prefill") return &o->tensor_core_prefill;
  if (key == "mixed_graphs") return &o->graph_mixed_steps;
  return nullptr;
}

// WEFT_CUDA_KERNELS (cuda_backend.h): comma-separated key=value overrides.
absl::Status ApplyKernelOverrides(absl::string_view spec, CudaBackendOptions* o) {
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    const std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, '=');
    const absl::string_view key = kv.first, value = kv.second;
    if (key == "decode" && (value == "pipelined" || value == "split_v1" || value == "grouped")) {
      o->decode_kernel = value == "pipelined"  ? kc::DecodeKernel::kPipelined
                         : value == "grouped" ? kc::DecodeKernel::kGrouped
                                              : kc::DecodeKernel::kSplitV1;
    } else if (bool* flag = BoolKey(key, o);
               flag != nullptr && (value == "0" || value == "1")) {
      *flag = value == "1";
    } else if (int32_t rows = 0; key == "qgemm" && absl::SimpleAtoi(value, &rows) &&
                                 ValidateQuantGemmMaxRows(rows).ok()) {
      o->quant_gemm_max_rows = rows;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "WEFT_CUDA_KERNELS: '", item,
          "' is not decode=pipelined|split_v1|grouped, fused=0|1, norm_gemv=0|1, "
          "rope_gemv=0|1, pdl=0|1, tc_prefill=0|1, mixed_graphs=0|1 or qgemm=<rows 0..",
          kMaxQuantGemmMaxRows, ">"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

kc::DecodeKernel DefaultDecodeKernel(int32_t queries_per_kv_head) {
  return queries_per_kv_head >= 2 ? kc::DecodeKernel::kGrouped : kc::DecodeKernel::kPipelined;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    const GgufFile& file, const CudaBackendOptions& options) {
  WEFT_RETURN_IF_ERROR(options.Validate());
  CudaBackendOptions o = options;
  if (const char* spec = std::getenv("WEFT_CUDA_KERNELS"); spec != nullptr) {
    WEFT_RETURN_IF_ERROR(ApplyKernelOverrides(spec, &o));
    LOG(INFO) << "CUDA kernels overridden by WEFT_CUDA_KERNELS=" << spec;
  }
  std::unique_ptr<CudaBackend> b(new CudaBackend(o));
  WEFT_RETURN_IF_ERROR(b->Init(file));
  return b;
}

absl::Status CudaBackend::Init(const GgufFile& file) {
  const int devices = kc::CudaDeviceCount();
  if (devices == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--backend=cuda: no CUDA device is available (", kc::CudaNoDeviceReason(), ")"));
  }
  device_ = options_.device >= 0 ? options_.device : options_.rank % devices;
  if (device_ >= devices) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ", device_, " of ", devices));
  }
  WEFT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  WEFT_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device_));
  int cc_major = 0;
  WEFT_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, device_));
  programmatic_launch_ = options_.programmatic_launch && cc_major >= 9;
  if (options_.programmatic_launch && !programmatic_launch_) {
    LOG(WARNING) << "cuda: programmatic dependent launch needs compute capability 9.0+ "
                 << "(device " << device_ << " has " << cc_major << ".x): launching without it";
  }
  WEFT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  WEFT_CUBLAS_RETURN_IF_ERROR(cublasCreate(&cublas_));

  WEFT_ASSIGN_OR_RETURN(config_, ModelConfig::FromGguf(file));
  decode_kernel_ = options_.decode_kernel.value_or(
      DefaultDecodeKernel(config_.queries_per_kv_head()));
  WEFT_ASSIGN_OR_RETURN(shard_,
                        ShardSpec::Compute(config_, options_.world_size, options_.rank));
  if (!kc::AttentionHeadDimSupported(config_.head_dim)) {
    return absl::UnimplementedError(absl::StrCat(
        "the CUDA attention kernels take head_dim 64, 128 or 256, not ", config_.head_dim));
  }
  if (config_.queries_per_kv_head() > kc::MaxAttentionGroup(config_.head_dim)) {
    return absl::UnimplementedError(absl::StrCat(
        config_.queries_per_kv_head(), " query heads per KV head: the CUDA kernels take ",
        kc::MaxAttentionGroup(config_.head_dim), " at head_dim ", config_.head_dim));
  }
  {
    // Views of the mmap'd file with this rank's slices; uploaded, then dropped.
    WEFT_ASSIGN_OR_RETURN(const LlamaWeights host,
                          LlamaWeights::Load(file, config_, shard_, KernelChoice::kReference));
    cuda_backend::DeviceWeightsOptions wo;
    // The GEMV and the fused GEMM read the same quantized copy.
    wo.gemv_copies = options_.gemv_max_rows > 0 || options_.quant_gemm_max_rows > 0;
    WEFT_ASSIGN_OR_RETURN(weights_,
                          cuda_backend::DeviceWeights::Upload(file, host, wo, stream_));
  }
  KvPoolOptions ko;
  ko.num_layers = config_.num_layers;
  ko.num_kv_heads = shard_.num_kv_heads();
  ko.head_dim = config_.head_dim;
  ko.block_size = options_.block_size;
  ko.dtype = options_.kv_dtype;
  {
    // After the weights: what is in use now counts against --gpu_memory_utilization.
    size_t free_bytes = 0, total_bytes = 0;
    WEFT_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
    WEFT_ASSIGN_OR_RETURN(
        const KvPoolSizing sizing,
        SizeDeviceKvPool(options_.num_kv_blocks, options_.kv_memory_bytes,
                         options_.gpu_memory_utilization,
                         DeviceMemory{static_cast<int64_t>(free_bytes),
                                      static_cast<int64_t>(total_bytes)},
                         kActivationReserveBytes, cuda_backend::DeviceKvCache::BytesPerBlock(ko)));
    ko.num_blocks = sizing.num_blocks;
    LOG(INFO) << "cuda: KV pool of " << sizing.num_blocks << " blocks, " << sizing.bytes
              << " bytes on device " << device_ << " (" << sizing.source << ")";
  }
  WEFT_ASSIGN_OR_RETURN(kv_, cuda_backend::DeviceKvCache::Create(ko));
  // Kernel shared memory limits, before any step may be captured into a graph.
  WEFT_CUDA_RETURN_IF_ERROR(kc::PrepareAttentionKernels());
  cuda_backend::RunnerOptions ro;
  ro.gemv_max_rows = options_.gemv_max_rows;
  ro.quant_gemm_max_rows = options_.quant_gemm_max_rows;
  ro.num_sms = num_sms_;
  ro.fused = options_.fused_kernels;
  ro.norm_gemv = options_.norm_gemv;
  ro.rope_gemv = options_.rope_gemv;
  ro.programmatic_launch = programmatic_launch_;
  ro.decode_kernel = decode_kernel_;
  runner_ = std::make_unique<cuda_backend::ModelRunner>(config_, shard_, weights_.get(),
                                                        kv_.get(), cublas_, ro);
  WEFT_RETURN_IF_ERROR(runner_->Init(stream_));
  // The KV pool's cudaMemset and the cudaMemcpy uploads of pageable vectors (norm weights,
  // GEMV copies, RoPE tables) ran on the legacy default stream, which a non-blocking
  // stream_ does not wait for: the memset returns before it is done and a pageable copy
  // once staged, not delivered (CUDA "API synchronization behavior"). Without this a first
  // step could write KV the memset then clears, or read a table still in flight.
  WEFT_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());

  limits_.block_size = options_.block_size;
  limits_.num_blocks = kv_->num_blocks();
  limits_.context_length = config_.context_length;
  limits_.vocab_size = config_.vocab_size;
  limits_.prefill_tile_tokens =
      kc::PrefillTileTokens(config_.queries_per_kv_head(), config_.head_dim);
  if (options_.tensor_core_prefill) {
    limits_.prefill_tc_tile_tokens = kc::PrefillTcTileTokens(config_.queries_per_kv_head());
    limits_.prefill_tc_min_tokens = kc::kTensorCorePrefillMinTokens;
  }
  graph_policy_.graphs = options_.cuda_graphs && options_.world_size == 1;
  graph_policy_.max_graph_batch = options_.max_graph_batch;
  graph_policy_.mixed = options_.graph_mixed_steps;
  graph_policy_.max_graph_tokens = options_.max_graph_tokens;
  stepper_ = std::make_unique<ForwardStepper>(config_.vocab_size);
  slots_ = cuda_backend::SequenceSlots(limits_.max_blocks_per_seq());
  kernels_ = absl::StrCat("cuda-cublas-bf16;weights=", weights_->types(),
                          options_.gemv_max_rows > 0 ? ";gemv<=" : "",
                          options_.gemv_max_rows > 0 ? absl::StrCat(options_.gemv_max_rows) : "",
                          options_.quant_gemm_max_rows > 0 ? ";qgemm<=" : "",
                          options_.quant_gemm_max_rows > 0
                              ? absl::StrCat(options_.quant_gemm_max_rows)
                              : "",
                          ";kv=", KvDtypeName(options_.kv_dtype),
                          graph_policy_.graphs ? ";graphs" : "",
                          graph_policy_.graphs && graph_policy_.mixed
                              ? absl::StrCat(";mixed_graphs<=", options_.max_graph_tokens)
                              : "",
                          ";decode=", kc::DecodeKernelName(decode_kernel_),
                          options_.fused_kernels ? ";fused" : "",
                          options_.norm_gemv ? ";norm_gemv" : "",
                          options_.rope_gemv ? ";rope_gemv" : "",
                          programmatic_launch_ ? ";pdl" : "",
                          options_.tensor_core_prefill ? ";tc_prefill" : "",
                          options_.world_size > 1 ? ";nccl" : "");
  cudaDeviceProp prop;
  WEFT_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device_));
  LOG(INFO) << "CUDA backend on device " << device_ << " (" << prop.name << ", sm_"
            << prop.major << prop.minor << ", " << num_sms_ << " SMs): weights "
            << (weights_->device_bytes() >> 20) << " MiB, KV pool " << (kv_->pool_bytes() >> 20)
            << " MiB (" << kv_->num_blocks() << " blocks), kernels " << kernels_;
  return absl::OkStatus();
}

CudaBackend::~CudaBackend() {
  // The caller's thread may have another device current (tensor-parallel ranks of one
  // process, tests): free on this backend's own.
  if (stream_ != nullptr) {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
  }
  comm_.reset();
  graphs_.Clear();
  runner_.reset();
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

cuda_backend::StepGraph CudaBackend::ChooseGraph(const ForwardBatch& batch) const {
  return cuda_backend::ChooseStepGraph(graph_policy_, static_cast<int32_t>(batch.sequences.size()),
                                       cuda_backend::StepInputs::NumTokens(batch),
                                       cuda_backend::StepInputs::AllDecode(batch));
}

absl::Status CudaBackend::Sync() {
  if (comm_ != nullptr) return comm_->Wait(stream_);
  WEFT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyBlock(int32_t src, int32_t dst) {
  if (src < 0 || src >= kv_->num_blocks() || dst < 0 || dst >= kv_->num_blocks()) {
    return absl::OutOfRangeError(absl::StrCat("CopyBlock(", src, ", ", dst, ") outside [0, ",
                                              kv_->num_blocks(), ")"));
  }
  if (src == dst) return absl::OkStatus();
  // One kernel copies every queued pair at once, so a pair must not read a block an
  // earlier queued pair writes (or write one it reads): flush first in that case.
  for (size_t i = 0; i < pending_copies_.size(); i += 2) {
    if (pending_copies_[i + 1] == src || pending_copies_[i] == dst ||
        pending_copies_[i + 1] == dst) {
      WEFT_RETURN_IF_ERROR(FlushCopies());
      break;
    }
  }
  pending_copies_.push_back(src);
  pending_copies_.push_back(dst);
  return absl::OkStatus();
}

absl::Status CudaBackend::FlushCopies() {
  if (pending_copies_.empty()) return absl::OkStatus();
  const size_t bytes = pending_copies_.size() * sizeof(int32_t);
  // The pinned staging buffer may still feed an earlier flush's copy: wait for it.
  WEFT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  WEFT_RETURN_IF_ERROR(copies_host_.Reserve(bytes));
  WEFT_RETURN_IF_ERROR(copies_dev_.Reserve(bytes));
  std::memcpy(copies_host_.get(), pending_copies_.data(), bytes);
  WEFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(copies_dev_.get(), copies_host_.get(), bytes,
                                            cudaMemcpyHostToDevice, stream_));
  WEFT_CUDA_RETURN_IF_ERROR(kc::CopyKvBlocks(kv_->pool(), kv_->bytes_per_block(),
                                             copies_dev_.as<int32_t>(),
                                             static_cast<int32_t>(pending_copies_.size() / 2),
                                             stream_));
  pending_copies_.clear();
  return absl::OkStatus();
}

std::string CudaBackend::CommInit() {
  if (options_.world_size == 1 || options_.rank != 0) return std::string();
  absl::StatusOr<std::string> id = NcclCommunicator::NewUniqueId();
  if (!id.ok()) {
    LOG(ERROR) << "cannot make an NCCL unique id: " << id.status();
    return std::string();
  }
  return *id;
}

void CudaBackend::LeaveGroup() {
  // Called between steps: nothing of ours is in flight unless a failed step left work
  // behind, whose NCCL kernels were aborted with the communicator.
  cudaSetDevice(device_);
  cudaStreamSynchronize(stream_);
  stream_dirty_ = false;
  comm_.reset();
}

absl::Status CudaBackend::JoinGroup(absl::string_view replica, int64_t epoch,
                                    absl::string_view comm_init) {
  WEFT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  // Work queued by a failed step drains once its NCCL kernels were aborted. Copies
  // queued by the last attachment's last plan still happen (as they would have before
  // its next step).
  WEFT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  stream_dirty_ = false;
  WEFT_RETURN_IF_ERROR(FlushCopies());
  WEFT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  slots_.Clear();  // a new attachment: the StateCache starts empty
  if (options_.world_size == 1) return absl::OkStatus();
  comm_.reset();
  NcclCommunicatorOptions o;
  o.rank = options_.rank;
  o.world_size = options_.world_size;
  o.device = device_;
  o.timeout = options_.comm_timeout;
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> c = NcclCommunicator::Create(comm_init, o);
  if (!c.ok()) {
    return absl::Status(c.status().code(),
                        absl::StrCat("joining the NCCL group of replica '", replica, "' epoch ",
                                     epoch, ": ", c.status().message()));
  }
  comm_ = std::move(*c);
  LOG(INFO) << "rank " << options_.rank << "/" << options_.world_size << " of replica '"
            << replica << "' joined its NCCL group (epoch " << epoch << ")";
  return absl::OkStatus();
}

absl::Status CudaBackend::Forward(const ForwardBatch& batch, ForwardOutput* out) {
  out->vocab_size = config_.vocab_size;
  out->num_rows = 0;
  out->row_sequence.clear();
  if (options_.world_size > 1 && comm_ == nullptr) {
    return absl::FailedPreconditionError("the tensor-parallel group is not formed");
  }
  WEFT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  if (stream_dirty_) {
    WEFT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    stream_dirty_ = false;
  }
  if (batch.sequences.empty()) return FlushCopies();
  const cuda_backend::StepGraph graph = ChooseGraph(batch);
  WEFT_RETURN_IF_ERROR(inputs_.Build(batch, limits_, graph));  // before anything is queued
  WEFT_RETURN_IF_ERROR(FlushCopies());
  stream_dirty_ = true;  // cleared once the step's work is known to be finished
  WEFT_RETURN_IF_ERROR(EnqueueForward(graph, nullptr));
  int32_t rows = 0;
  for (const cuda_backend::OutputRow& r : inputs_.output_rows()) {
    rows = std::max(rows, r.logits_row + 1);
  }
  const size_t row_bytes = static_cast<size_t>(config_.vocab_size) * sizeof(float);
  if (rows > 0) {
    WEFT_RETURN_IF_ERROR(logits_host_.Reserve(rows * row_bytes));
    WEFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits_host_.get(), runner_->logits(),
                                              rows * row_bytes, cudaMemcpyDeviceToHost, stream_));
    d2h_bytes_ += static_cast<int64_t>(rows * row_bytes);
  }
  WEFT_RETURN_IF_ERROR(Sync());
  stream_dirty_ = false;
  CopyLogits(out);
  return absl::OkStatus();
}

absl::Status CudaBackend::EnqueueForward(cuda_backend::StepGraph graph, const int32_t* tables) {
  using Kind = cuda_backend::StepGraph::Kind;
  StepArgs args;
  args.layout = inputs_.layout();
  args.shape = inputs_.shape();
  args.tables = tables;
  // A decode graph bakes its split plan in for its context bucket; piecewise and eager
  // steps launch attention eagerly, planned from the real contexts.
  const int32_t max_ctx = graph.kind == Kind::kDecode
                              ? ContextBucket(inputs_.max_decode_context(), config_.context_length)
                              : inputs_.max_decode_context();
  kc::DecodeShape ds;
  ds.num_items = args.shape.decode_items;
  ds.num_kv_heads = shard_.num_kv_heads();
  ds.group_size = config_.queries_per_kv_head();
  ds.head_dim = config_.head_dim;
  ds.block_size = options_.block_size;
  ds.max_context = max_ctx;
  ds.num_sms = num_sms_;
  ds.dtype = options_.kv_dtype;
  const kc::DecodePlan plan = kc::PlanDecode(decode_kernel_, ds);
  args.decode_partition = plan.partition_size;
  args.decode_max_splits = plan.max_splits;
  cuda_backend::ModelRunner::ReserveMoves moves;
  WEFT_RETURN_IF_ERROR(runner_->Reserve(args.shape.tokens, args.shape.logit_rows,
                                        plan.workspace_floats, &moves, stream_));
  if (moves.activations) graphs_.Clear();
  if (moves.attention) graphs_.Clear(cuda_backend::GraphCache::Kind::kDecode);
  WEFT_ASSIGN_OR_RETURN(cuda_backend::DeviceBuffer * meta,
                        MetaFor(graph, args.layout.total_bytes));
  WEFT_RETURN_IF_ERROR(meta_host_.Reserve(args.layout.total_bytes));
  inputs_.Pack(meta_host_.get());
  WEFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(meta->get(), meta_host_.get(), inputs_.upload_bytes(),
                                            cudaMemcpyHostToDevice, stream_));
  h2d_bytes_ += static_cast<int64_t>(inputs_.upload_bytes());
  args.meta = meta->as<uint8_t>();
  switch (graph.kind) {
    case Kind::kDecode:
      return RunDecodeGraph(args, graph.bucket, max_ctx);
    case Kind::kPiecewise: {
      cuda_backend::PiecewiseGraphs pieces(&graphs_, stream_, graph.bucket, args.shape.logit_rows);
      const absl::Status s = runner_->Enqueue(args, nullptr, stream_, &pieces);
      piece_captures_ += pieces.captures();
      WEFT_RETURN_IF_ERROR(s);
      ++piecewise_steps_;
      return absl::OkStatus();
    }
    case Kind::kEager:
      break;
  }
  WEFT_RETURN_IF_ERROR(runner_->Enqueue(args, comm_.get(), stream_));
  ++eager_steps_;
  return absl::OkStatus();
}

absl::StatusOr<cuda_backend::DeviceBuffer*> CudaBackend::MetaFor(cuda_backend::StepGraph graph,
                                                                 size_t bytes) {
  switch (graph.kind) {
    case cuda_backend::StepGraph::Kind::kDecode:
      if (meta_graph_.get() == nullptr) {
        // Sized once for the largest bucket (tables packed: the larger form), so captured
        // addresses never move.
        cuda_backend::StepShape biggest;
        biggest.tokens = biggest.decode_items = biggest.logit_rows = options_.max_graph_batch;
        biggest.table_entries = options_.max_graph_batch * limits_.max_blocks_per_seq();
        WEFT_RETURN_IF_ERROR(
            meta_graph_.Allocate(cuda_backend::StepLayout::For(biggest).total_bytes));
      }
      return &meta_graph_;
    case cuda_backend::StepGraph::Kind::kPiecewise:
      if (bytes > meta_pieces_.bytes()) {
        // The attention arrays and packed tables vary per step: grown by doubling; the
        // pieces captured its old address.
        size_t cap = std::max<size_t>(meta_pieces_.bytes(), 4096);
        while (cap < bytes) cap *= 2;
        WEFT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));  // may be in use
        WEFT_RETURN_IF_ERROR(meta_pieces_.Allocate(cap));
        graphs_.Clear(cuda_backend::GraphCache::Kind::kPiece);
      }
      return &meta_pieces_;
    case cuda_backend::StepGraph::Kind::kEager:
      break;
  }
  WEFT_RETURN_IF_ERROR(meta_eager_.Reserve(bytes));
  return &meta_eager_;
}

absl::Status CudaBackend::RunDecodeGraph(const StepArgs& args, int32_t bucket, int32_t max_ctx) {
  const cuda_backend::GraphCache::Key key{cuda_backend::GraphCache::Kind::kDecode, bucket,
                                          max_ctx, args.tables != nullptr ? 1 : 0};
  bool captured = false;
  int64_t nodes = 0;
  WEFT_ASSIGN_OR_RETURN(
      cudaGraphExec_t exec,
      graphs_.Get(key, stream_, [&] { return runner_->Enqueue(args, nullptr, stream_); },
                  &captured, &nodes));
  if (captured) {
    ++graph_captures_;
    last_graph_nodes_ = nodes;
  }
  WEFT_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec, stream_));
  ++graph_replays_;
  return absl::OkStatus();
}

void CudaBackend::CopyLogits(ForwardOutput* out) const {
  const std::vector<cuda_backend::OutputRow>& rows = inputs_.output_rows();
  const int64_t vocab = config_.vocab_size;
  if (out->logits.size() < rows.size() * vocab) out->logits.resize(rows.size() * vocab);
  for (size_t r = 0; r < rows.size(); ++r) {
    std::memcpy(out->logits.data() + r * vocab,
                logits_host_.as<float>() + int64_t{rows[r].logits_row} * vocab,
                vocab * sizeof(float));
    out->row_sequence.push_back(rows[r].sequence);
  }
  out->num_rows = static_cast<int32_t>(rows.size());
}

}  // namespace weft

#include "worker/backends/cuda/model_runner.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/paged_kv.h"
#include "kernels/cuda/quant.h"
#include "kernels/cuda/quant_gemm.h"
#include "kernels/cuda/rope_kv.h"
#include "kernels/cpu/rope.h"

namespace weft::cuda_backend {
namespace {

namespace kc = ::weft::kernels::cuda;

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

template <typename T>
const T* At(const StepArgs& s, size_t offset) {
  return reinterpret_cast<const T*>(s.meta + offset);
}

// Reserves `bytes`; *moved when an existing allocation was replaced, *grew (optional)
// when the buffer was (re)allocated.
absl::Status Grow(DeviceBuffer* b, size_t bytes, bool* moved, bool* grew = nullptr) {
  bool reallocated = false;
  const bool had = b->get() != nullptr;
  WEFT_RETURN_IF_ERROR(b->Reserve(bytes, &reallocated));
  if (reallocated && had) *moved = true;
  if (grew != nullptr) *grew = reallocated;
  return absl::OkStatus();
}

}  // namespace

ModelRunner::ModelRunner(const ModelConfig& config, const ShardSpec& shard,
                         const DeviceWeights* weights, DeviceKvCache* kv, cublasHandle_t cublas,
                         const RunnerOptions& options)
    : config_(config),
      shard_(shard),
      weights_(weights),
      kv_(kv),
      cublas_(cublas),
      options_(options),
      q_width_(int64_t{shard.num_heads()} * config.head_dim),
      kv_width_(int64_t{shard.num_kv_heads()} * config.head_dim),
      qkv_width_(q_width_ + 2 * kv_width_),
      ffn_(shard.num_ff()) {
  for (const LayerSpec& l : config_.layers) {
    post_norms_ = post_norms_ || l.post_attention_norm || l.post_ffn_norm;
  }
}

absl::Status ModelRunner::Init(cudaStream_t stream) {
  // One table per distinct RoPE of the layers (kernels/cpu/rope.h's inverse frequencies).
  std::vector<RopeSpec> distinct;
  inv_freq_.clear();
  layer_rope_.clear();
  for (const LayerSpec& l : config_.layers) {
    size_t i = std::find(distinct.begin(), distinct.end(), l.rope) - distinct.begin();
    if (i == distinct.size()) {
      distinct.push_back(l.rope);
      std::vector<double> inv(config_.rope_dim / 2);
      kernels::RopeInvFreq(l.rope.freq_base, config_.rope_dim, l.rope.freq_scale,
                           l.rope.freq_factors ? weights_->rope_freqs().data() : nullptr,
                           inv.data());
      DeviceBuffer b;
      WEFT_RETURN_IF_ERROR(b.Allocate(inv.size() * sizeof(double)));
      WEFT_CUDA_RETURN_IF_ERROR(cudaMemcpy(b.get(), inv.data(), inv.size() * sizeof(double),
                                           cudaMemcpyHostToDevice));
      inv_freq_.push_back(std::move(b));
    }
    layer_rope_.push_back(static_cast<int32_t>(i));
  }
  if (options_.quant_gemm_max_rows > 0) {
    WEFT_RETURN_IF_ERROR(quant_gemm_partials_.Allocate(
        static_cast<size_t>(kc::QuantGemmMaxScratchFloats(options_.num_sms)) * sizeof(float)));
  }
  WEFT_RETURN_IF_ERROR(cublas_ws_.Allocate(kCublasWorkspaceBytes));
  return BindCublas(stream);
}

absl::Status ModelRunner::BindCublas(cudaStream_t stream) {
  // cublasSetStream resets the handle to cuBLAS's default workspace pool: the fixed
  // workspace is set again after it, every time, so that no GEMM queued under stream
  // capture (decode graphs, pieces) allocates.
  WEFT_CUBLAS_RETURN_IF_ERROR(cublasSetStream(cublas_, stream));
  WEFT_CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(cublas_, cublas_ws_.get(), cublas_ws_.bytes()));
  return absl::OkStatus();
}

absl::Status ModelRunner::Reserve(int32_t tokens, int32_t rows, int64_t decode_ws_floats,
                                  ReserveMoves* moves, cudaStream_t stream) {
  bool* moved = &moves->activations;
  const size_t t = static_cast<size_t>(std::max(tokens, 1));
  const size_t r = static_cast<size_t>(std::max(rows, 1));
  const size_t hidden = static_cast<size_t>(config_.hidden_size);
  WEFT_RETURN_IF_ERROR(Grow(&x_, t * hidden * 4, moved));
  WEFT_RETURN_IF_ERROR(Grow(&h_, t * hidden * 2, moved));
  WEFT_RETURN_IF_ERROR(Grow(&qkv_, t * qkv_width_ * 4, moved));
  bool attn_grew = false;
  WEFT_RETURN_IF_ERROR(Grow(&attn_, t * q_width_ * 2, moved, &attn_grew));
  if (attn_grew) {
    // Attention writes the rows of real tokens only: a padding token's row (piecewise
    // graphs) keeps what was there, finite from here on, never NaN from a fresh allocation.
    WEFT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(attn_.get(), 0, attn_.bytes(), stream));
  }
  WEFT_RETURN_IF_ERROR(Grow(&gu_, t * 2 * ffn_ * 4, moved));
  WEFT_RETURN_IF_ERROR(Grow(&act_, t * ffn_ * 2, moved));
  if (shard_.world_size > 1 || post_norms_) {
    WEFT_RETURN_IF_ERROR(Grow(&proj_, t * hidden * 4, moved));
  }
  WEFT_RETURN_IF_ERROR(Grow(&logits_, r * config_.vocab_size * 4, moved));
  // Partials only (no state between launches): any plan may use what an earlier one left.
  // Grown to powers of two: eager and piecewise steps plan from the real contexts, and
  // each move drops the decode graphs.
  size_t ws = 1;
  while (ws < static_cast<size_t>(std::max<int64_t>(decode_ws_floats, 1))) ws *= 2;
  WEFT_RETURN_IF_ERROR(Grow(&decode_ws_, ws * 4, &moves->attention));
  // Split counters: a fixed (item, KV head) layout for every plan, one per decode item at
  // most (items <= tokens), zero from allocation on; the decode kernel leaves them zero.
  const int64_t counters =
      kc::DecodeSplitCounters(static_cast<int32_t>(t), shard_.num_kv_heads());
  bool counters_grew = false;
  WEFT_RETURN_IF_ERROR(Grow(&split_counters_, static_cast<size_t>(counters) * sizeof(int32_t),
                            &moves->attention, &counters_grew));
  if (counters_grew) {
    WEFT_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(split_counters_.get(), 0, split_counters_.bytes(), stream));
  }
  return absl::OkStatus();
}

absl::Status ModelRunner::Linear(const DeviceLinear& w, const void* x, int64_t ldx, int32_t m,
                                 float* y, int64_t ldy, bool accumulate) {
  const bool gemv = m <= options_.gemv_max_rows;
  if (w.has_gemv && (gemv || m <= options_.quant_gemm_max_rows)) {
    cudaStream_t stream;
    WEFT_CUBLAS_RETURN_IF_ERROR(cublasGetStream(cublas_, &stream));
    const kc::QuantGemmScratch scratch{options_.num_sms, quant_gemm_partials_.as<float>()};
    const auto* xb = static_cast<const uint16_t*>(x);
    for (const GemvPart& part : w.gemv_parts) {  // one per type of a mixed fused matrix
      WEFT_CUDA_RETURN_IF_ERROR(
          gemv ? kc::QuantGemv(part.weights, xb, ldx, m, y + part.row0, ldy, accumulate, stream)
               : kc::QuantGemm(part.weights, xb, ldx, m, y + part.row0, ldy, accumulate,
                               scratch, stream));
    }
    return absl::OkStatus();
  }
  WEFT_CUBLAS_RETURN_IF_ERROR(kc::Gemm(cublas_, kc::WeightDtype::kBf16, x, ldx, w.dense, w.k, m,
                                       w.n, w.k, y, kc::ActDtype::kF32, ldy,
                                       accumulate ? 1.0f : 0.0f));
  return absl::OkStatus();
}

absl::Status ModelRunner::Norm(const float* weight, int32_t tokens, const int32_t* rows,
                               cudaStream_t stream) {
  kc::RmsNormArgs a;
  a.x = x_.as<float>();
  a.x_stride = config_.hidden_size;
  if (pending_delta_ && rows == nullptr) {
    a.delta = proj_.as<float>();
    a.delta_stride = config_.hidden_size;
    a.delta_weight = pending_delta_norm_;
    pending_delta_ = false;
  }
  a.rows = rows;
  a.weight = weight;
  a.num_rows = tokens;
  a.dim = config_.hidden_size;
  a.eps = config_.rms_norm_eps;
  a.out = h_.get();
  a.out_dtype = kc::ActDtype::kBf16;
  a.out_stride = config_.hidden_size;
  WEFT_CUDA_RETURN_IF_ERROR(kc::RmsNorm(a, stream));
  return absl::OkStatus();
}

bool ModelRunner::FoldsNorm(const DeviceLinear& w, int32_t tokens) const {
  return options_.norm_gemv && !pending_delta_ && w.has_gemv &&
         tokens <= options_.gemv_max_rows && kc::GemvNormFits(config_.hidden_size, tokens);
}

kc::RopeKvArgs ModelRunner::RopeArgs(const StepArgs& s, int32_t layer) const {
  kc::RopeKvArgs a;
  a.qkv = qkv_.as<float>();
  a.stride = qkv_width_;
  a.num_heads = shard_.num_heads();
  a.num_tokens = s.shape.tokens;
  a.positions = At<int32_t>(s, s.layout.positions);
  a.slot_mapping = At<int64_t>(s, s.layout.slots);
  a.inv_freq = inv_freq_[layer_rope_[layer]].as<double>();
  a.rot_dim = config_.rope_dim;
  a.style = config_.rope_pairing == RopePairing::kAdjacent ? kernels::RopeStyle::kNormal
                                                           : kernels::RopeStyle::kNeox;
  return a;
}

bool ModelRunner::FoldsRopeKv(int32_t layer, int32_t tokens) const {
  const DeviceLayer& w = weights_->layers()[layer];
  return options_.rope_gemv && options_.fused && w.qkv.has_gemv &&
         w.qkv.gemv_parts.size() == 1 && tokens <= options_.gemv_max_rows &&
         w.qkv_bias.get() == nullptr && w.q_norm.get() == nullptr &&
         config_.rope_pairing == RopePairing::kAdjacent && config_.head_dim % 8 == 0;
}

kc::GemvNorm ModelRunner::ResidualNorm(const float* weight) const {
  return kc::GemvNorm{x_.as<float>(), config_.hidden_size, weight, config_.rms_norm_eps};
}

absl::Status ModelRunner::NormedGemv(const kc::GemvNorm& norm, const DeviceLinear& w,
                                     int32_t tokens, float* y, int64_t ldy,
                                     cudaStream_t stream) {
  for (const GemvPart& part : w.gemv_parts) {
    WEFT_CUDA_RETURN_IF_ERROR(
        kc::QuantGemvNormed(part.weights, norm, tokens, y + part.row0, ldy, false, stream));
  }
  return absl::OkStatus();
}

absl::Status ModelRunner::Project(const DeviceLinear& w, const void* in, int64_t ld_in,
                                  int32_t tokens, const float* post_norm,
                                  NcclCommunicator* comm, cudaStream_t stream) {
  const int64_t hidden = config_.hidden_size;
  if (comm == nullptr && post_norm == nullptr) {
    return Linear(w, in, ld_in, tokens, x_.as<float>(), hidden, /*accumulate=*/true);
  }
  WEFT_RETURN_IF_ERROR(Linear(w, in, ld_in, tokens, proj_.as<float>(), hidden, false));
  if (comm != nullptr) {
    WEFT_RETURN_IF_ERROR(comm->AllReduceSumAsync(proj_.as<float>(),
                                                 static_cast<size_t>(tokens * hidden), stream));
  }
  pending_delta_ = true;
  pending_delta_norm_ = post_norm;
  return absl::OkStatus();
}

absl::Status ModelRunner::QkvExtras(int32_t layer, int32_t tokens, cudaStream_t stream) {
  const DeviceLayer& w = weights_->layers()[layer];
  float* qkv = qkv_.as<float>();
  if (w.qkv_bias.get() != nullptr) {
    WEFT_CUDA_RETURN_IF_ERROR(kc::AddRowBias(qkv, qkv_width_, tokens, w.qkv_bias.as<float>(),
                                             qkv_width_, stream));
  }
  if (w.q_norm.get() != nullptr) {
    WEFT_CUDA_RETURN_IF_ERROR(kc::HeadRmsNorm(qkv, qkv_width_, tokens, shard_.num_heads(),
                                              config_.head_dim, w.q_norm.as<float>(),
                                              config_.rms_norm_eps, stream));
    WEFT_CUDA_RETURN_IF_ERROR(kc::HeadRmsNorm(qkv + q_width_, qkv_width_, tokens,
                                              shard_.num_kv_heads(), config_.head_dim,
                                              w.k_norm.as<float>(), config_.rms_norm_eps,
                                              stream));
  }
  return absl::OkStatus();
}

absl::Status ModelRunner::Attention(const StepArgs& s, int32_t layer, cudaStream_t stream) {
  const kc::PagedKvView kv = kv_->Layer(layer);
  const float scale = config_.attention_scale;
  const int32_t window = config_.layers[layer].sliding_window;
  const int32_t* tables = s.tables != nullptr ? s.tables : At<int32_t>(s, s.layout.tables);
  if (s.shape.decode_items > 0) {
    kc::DecodeAttentionArgs a;
    a.q = qkv_.as<float>();
    a.q_stride = qkv_width_;
    a.q_rows = At<int32_t>(s, s.layout.dec_row);
    a.out = attn_.get();
    a.out_stride = q_width_;
    a.out_dtype = kc::ActDtype::kBf16;
    a.context_lens = At<int32_t>(s, s.layout.dec_ctx);
    a.block_tables = tables;
    a.block_table_offsets = At<int32_t>(s, s.layout.dec_table);
    a.num_items = s.shape.decode_items;
    a.num_heads = shard_.num_heads();
    a.scale = scale;
    a.window = window;
    a.partition_size = s.decode_partition;
    a.max_splits = s.decode_max_splits;
    // kGrouped cuts each item's splits from its real context on the device (a graph's
    // grid stays the bucket's); the others keep the host's partition.
    if (options_.decode_kernel == kc::DecodeKernel::kGrouped) {
      a.device_min_partition = kc::kDecodeDeviceMinPartition;
    }
    a.workspace = decode_ws_.as<float>();
    a.split_counters = split_counters_.as<int32_t>();
    a.kernel = options_.decode_kernel;
    WEFT_CUDA_RETURN_IF_ERROR(kc::PagedDecodeAttention(a, kv, stream));
  }
  if (s.shape.tiles > 0) {
    // Tiles [0, tiles - tc_tiles): the CUDA-core kernel; the rest: tensor cores.
    const int32_t core_tiles = s.shape.tiles - s.shape.tc_tiles;
    kc::PrefillAttentionArgs a;
    a.q = qkv_.as<float>();
    a.q_stride = qkv_width_;
    a.out = attn_.get();
    a.out_stride = q_width_;
    a.out_dtype = kc::ActDtype::kBf16;
    a.seq_q_start = At<int32_t>(s, s.layout.pf_q_start);
    a.seq_start_pos = At<int32_t>(s, s.layout.pf_start_pos);
    a.seq_num_tokens = At<int32_t>(s, s.layout.pf_num_tokens);
    a.block_tables = tables;
    a.block_table_offsets = At<int32_t>(s, s.layout.pf_table);
    a.tile_seq = At<int32_t>(s, s.layout.tile_seq);
    a.tile_q_begin = At<int32_t>(s, s.layout.tile_q_begin);
    a.num_heads = shard_.num_heads();
    a.scale = scale;
    a.window = window;
    if (core_tiles > 0) {
      a.num_tiles = core_tiles;
      WEFT_CUDA_RETURN_IF_ERROR(kc::PagedPrefillAttention(a, kv, stream));
    }
    if (s.shape.tc_tiles > 0) {
      a.tile_seq += core_tiles;
      a.tile_q_begin += core_tiles;
      a.num_tiles = s.shape.tc_tiles;
      WEFT_CUDA_RETURN_IF_ERROR(kc::PagedPrefillAttentionTc(a, kv, stream));
    }
  }
  return absl::OkStatus();
}

absl::Status ModelRunner::RopeAndKv(const StepArgs& s, int32_t layer, cudaStream_t stream) {
  const kc::RopeKvArgs a = RopeArgs(s, layer);
  if (options_.fused) {
    WEFT_CUDA_RETURN_IF_ERROR(kc::RopeAndWritePagedKv(a, kv_->Layer(layer), stream));
    return absl::OkStatus();
  }
  float* qkv = a.qkv;
  WEFT_CUDA_RETURN_IF_ERROR(kc::ApplyRope(
      a.style, a.positions, a.inv_freq, a.rot_dim, config_.head_dim, a.num_tokens,
      {qkv, qkv_width_, a.num_heads}, {qkv + q_width_, qkv_width_, shard_.num_kv_heads()},
      stream));
  WEFT_CUDA_RETURN_IF_ERROR(kc::WritePagedKv(kv_->Layer(layer), qkv + q_width_,
                                             qkv + q_width_ + kv_width_, qkv_width_,
                                             a.slot_mapping, a.num_tokens, stream));
  return absl::OkStatus();
}

absl::Status ModelRunner::GateUpAct(const DeviceLinear& w, FfnActivation activation,
                                    int32_t tokens, const kc::GemvNorm* norm,
                                    cudaStream_t stream) {
  const bool silu = activation == FfnActivation::kSilu;
  // The fused kernel reads gate and up as one matrix (one type) with SwiGLU; a mixed pair
  // or GELU takes the per-part GEMVs below.
  if (silu && options_.fused && w.has_gemv && w.gemv_parts.size() == 1 &&
      tokens <= options_.gemv_max_rows) {
    auto* act = static_cast<uint16_t*>(act_.get());
    if (norm != nullptr) {
      WEFT_CUDA_RETURN_IF_ERROR(
          kc::QuantGemvNormedSwiGlu(w.gemv, *norm, tokens, act, ffn_, stream));
    } else {
      WEFT_CUDA_RETURN_IF_ERROR(kc::QuantGemvSwiGlu(
          w.gemv, static_cast<const uint16_t*>(h_.get()), config_.hidden_size, tokens, act,
          ffn_, stream));
    }
    return absl::OkStatus();
  }
  if (norm != nullptr) {
    WEFT_RETURN_IF_ERROR(NormedGemv(*norm, w, tokens, gu_.as<float>(), 2 * ffn_, stream));
  } else {
    WEFT_RETURN_IF_ERROR(
        Linear(w, h_.get(), config_.hidden_size, tokens, gu_.as<float>(), 2 * ffn_, false));
  }
  auto act = silu ? kc::SwiGlu : kc::GeGlu;
  WEFT_CUDA_RETURN_IF_ERROR(act(gu_.as<float>(), gu_.as<float>() + ffn_, 2 * ffn_, tokens, ffn_,
                                act_.get(), kc::ActDtype::kBf16, ffn_, stream));
  return absl::OkStatus();
}

absl::Status ModelRunner::Enqueue(const StepArgs& s, NcclCommunicator* comm, cudaStream_t stream,
                                  PieceHook* pieces) {
  WEFT_RETURN_IF_ERROR(BindCublas(stream));
  const kc::ScopedProgrammaticLaunch pdl(options_.programmatic_launch);
  pending_delta_ = false;
  pending_delta_norm_ = nullptr;
  const int32_t L = config_.num_layers;
  // Piece i: everything between attention i - 1 and attention i (pieces 0 and L: the ends).
  auto piece = [&](int32_t i, absl::FunctionRef<absl::Status()> queue) -> absl::Status {
    // No host state crosses a piece boundary: a replayed piece skips its host code.
    if (pending_delta_) return absl::InternalError("a delta pending at attention");
    if (pieces == nullptr) return queue();
    return pieces->Run(i, L + 1, queue);
  };
  WEFT_RETURN_IF_ERROR(piece(0, [&]() -> absl::Status {
    WEFT_CUDA_RETURN_IF_ERROR(kc::EmbeddingGather(
        weights_->embedding(), kc::WeightDtype::kBf16, config_.vocab_size, config_.hidden_size,
        At<int32_t>(s, s.layout.token_ids), s.shape.tokens, x_.as<float>(), config_.hidden_size,
        stream, config_.embedding_scale));
    return BeforeAttention(s, 0, stream);
  }));
  for (int32_t l = 0; l < L; ++l) {
    WEFT_RETURN_IF_ERROR(Attention(s, l, stream));
    WEFT_RETURN_IF_ERROR(piece(l + 1, [&]() -> absl::Status {
      WEFT_RETURN_IF_ERROR(AfterAttention(s, l, comm, stream));
      return l + 1 < L ? BeforeAttention(s, l + 1, stream) : Logits(s, stream);
    }));
  }
  return absl::OkStatus();
}

absl::Status ModelRunner::BeforeAttention(const StepArgs& s, int32_t l, cudaStream_t stream) {
  const DeviceLayer& w = weights_->layers()[l];
  const int32_t T = s.shape.tokens;
  const bool fold_norm = FoldsNorm(w.qkv, T);
  if (!fold_norm) WEFT_RETURN_IF_ERROR(Norm(w.attn_norm.as<float>(), T, nullptr, stream));
  const kc::GemvNorm norm = ResidualNorm(w.attn_norm.as<float>());
  if (FoldsRopeKv(l, T)) {
    WEFT_CUDA_RETURN_IF_ERROR(kc::QuantGemvRopeKv(
        w.qkv.gemv, static_cast<const uint16_t*>(h_.get()), config_.hidden_size,
        fold_norm ? &norm : nullptr, T, qkv_.as<float>(), qkv_width_, RopeArgs(s, l),
        kv_->Layer(l), stream));
    return absl::OkStatus();
  }
  if (fold_norm) {
    WEFT_RETURN_IF_ERROR(NormedGemv(norm, w.qkv, T, qkv_.as<float>(), qkv_width_, stream));
  } else {
    WEFT_RETURN_IF_ERROR(
        Linear(w.qkv, h_.get(), config_.hidden_size, T, qkv_.as<float>(), qkv_width_, false));
  }
  WEFT_RETURN_IF_ERROR(QkvExtras(l, T, stream));
  return RopeAndKv(s, l, stream);
}

absl::Status ModelRunner::AfterAttention(const StepArgs& s, int32_t l, NcclCommunicator* comm,
                                         cudaStream_t stream) {
  const DeviceLayer& w = weights_->layers()[l];
  const int32_t T = s.shape.tokens;
  WEFT_RETURN_IF_ERROR(
      Project(w.o, attn_.get(), q_width_, T, w.post_attn_norm.as<float>(), comm, stream));
  const bool fold_norm = FoldsNorm(w.gate_up, T);
  if (!fold_norm) WEFT_RETURN_IF_ERROR(Norm(w.ffn_norm.as<float>(), T, nullptr, stream));
  const kc::GemvNorm norm = ResidualNorm(w.ffn_norm.as<float>());
  WEFT_RETURN_IF_ERROR(GateUpAct(w.gate_up, config_.layers[l].activation, T,
                                 fold_norm ? &norm : nullptr, stream));
  return Project(w.down, act_.get(), ffn_, T, w.post_ffn_norm.as<float>(), comm, stream);
}

absl::Status ModelRunner::Logits(const StepArgs& s, cudaStream_t stream) {
  const int64_t hidden = config_.hidden_size;
  if (pending_delta_) {
    // The last layer's reduced FFN output still has to reach the residual stream (the
    // normalized rows written to h_ here are overwritten below).
    WEFT_RETURN_IF_ERROR(Norm(weights_->output_norm(), s.shape.tokens, nullptr, stream));
  }
  const int32_t R = s.shape.logit_rows;
  if (R == 0) return absl::OkStatus();
  WEFT_RETURN_IF_ERROR(Norm(weights_->output_norm(), R, At<int32_t>(s, s.layout.logit_rows),
                            stream));
  WEFT_RETURN_IF_ERROR(Linear(weights_->lm_head(), h_.get(), hidden, R, logits_.as<float>(),
                              config_.vocab_size, false));
  if (config_.final_logit_softcap > 0.0f) {
    WEFT_CUDA_RETURN_IF_ERROR(kc::SoftCap(logits_.as<float>(), config_.vocab_size, R,
                                          config_.vocab_size, config_.final_logit_softcap,
                                          stream));
  }
  return absl::OkStatus();
}

}  // namespace weft::cuda_backend

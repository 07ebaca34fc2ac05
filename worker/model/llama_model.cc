#include "worker/model/llama_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"

namespace weft {
namespace {

// Matmul column ranges handed to threads start on multiples of this.
constexpr int64_t kColumnAlign = 16;
// Below this many tokens, token-wise work runs on the calling thread (a fork-join
// costs more than the work).
constexpr int64_t kMinTokensToSplit = 4;
// Query tokens per prefill attention work item.
constexpr int32_t kPrefillItemTokens = 32;

template <typename T>
T* Grow(std::vector<T>* v, size_t n) {
  if (v->size() < n) v->resize(n);
  return v->data();
}

}  // namespace

struct LlamaModel::AttentionItem {
  int32_t seq = 0;
  int32_t kv_head = 0;
  int32_t q_begin = 0;
  int32_t q_end = 0;
  int32_t group_begin = 0;  // query heads of the group; [0, -1) = all
  int32_t group_end = -1;
};

// Buffers reused across steps (grown, never shrunk). Activations are token-major.
struct LlamaModel::Workspace {
  const ForwardBatch* batch = nullptr;
  int64_t num_tokens = 0;
  std::vector<int32_t> token_ids;       // [T]
  std::vector<int32_t> positions;       // [T]
  std::vector<int64_t> slots;           // [T] block * block_size + slot
  std::vector<int64_t> seq_offset;      // first flattened token of each sequence
  std::vector<AttentionItem> items;
  std::vector<int64_t> logit_tokens;    // flattened token of each logits row
  std::vector<int32_t> logit_seqs;      // its sequence
  std::vector<float> x;                 // [T][hidden] residual stream
  std::vector<float> h;                 // [T][hidden] normalized
  std::vector<float> q, attn;           // [T][q_width]
  std::vector<float> k, v;              // [T][kv_width]
  std::vector<float> proj;              // [T][hidden] O / down output
  std::vector<float> gate, up;          // [T][ffn]
  std::vector<std::vector<float>> cos_sin;  // per RoPE of the model: [T][rope_dim]
  std::vector<float> final_h;           // [rows][hidden]
  std::vector<float> local_logits;      // TP: [rows][this rank's vocabulary slice]
  std::vector<float> gathered_logits;   // TP: [rank][rows][that rank's slice]
  std::vector<size_t> gather_counts;    // TP: floats from each rank
  // x += proj is still to be done (ProjectAndAdd leaves it to the next token-wise pass),
  // after an RMSNorm of proj with pending_norm when that is set (post-norms).
  bool residual_pending = false;
  const float* pending_norm = nullptr;
  // Rounded forms (int8 / bf16) of the matmul inputs: h, attn, gate (after SwiGLU),
  // final_h.
  ActivationBuffer q8_h, q8_attn, q8_ffn, q8_final;
};

absl::Status LlamaModelOptions::Validate() const {
  if (num_threads < 1 || num_threads > 256) {
    return absl::InvalidArgumentError(absl::StrCat("num_threads ", num_threads,
                                                   " is outside [1, 256]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(
    const GgufFile& file, const LlamaModelOptions& options) {
  WEFT_RETURN_IF_ERROR(options.Validate());
  WEFT_ASSIGN_OR_RETURN(const ModelConfig config, ModelConfig::FromGguf(file));
  const int32_t world = options.all_reducer ? options.all_reducer->world_size() : 1;
  const int32_t rank = options.all_reducer ? options.all_reducer->rank() : 0;
  WEFT_ASSIGN_OR_RETURN(const ShardSpec shard, ShardSpec::Compute(config, world, rank));
  WEFT_ASSIGN_OR_RETURN(LlamaWeights weights,
                        LlamaWeights::Load(file, config, shard, options.kernels));
  if (config.queries_per_kv_head() > kernels::kMaxQueriesPerKvHead) {
    return absl::UnimplementedError("too many query heads per KV head");
  }
  return std::unique_ptr<LlamaModel>(new LlamaModel(options, std::move(weights)));
}

LlamaModel::LlamaModel(const LlamaModelOptions& options, LlamaWeights weights)
    : options_(options),
      weights_(std::move(weights)),
      pool_(options.num_threads),
      ws_(std::make_unique<Workspace>()) {
  const ModelConfig& c = weights_.config();
  if (options_.all_reducer != nullptr) {
    for (int32_t r = 0; r < shard().world_size; ++r) {
      auto l = ComputeShardLayout(c.num_heads, c.num_kv_heads, c.ffn_size, c.vocab_size,
                                  shard().world_size, r);
      CHECK(l.ok()) << l.status();  // this rank's own layout was computed the same way
      vocab_slices_.emplace_back(l->vocab_begin, l->vocab_end);
    }
  }
  rope_style_ = c.rope_pairing == RopePairing::kAdjacent ? kernels::RopeStyle::kNormal
                                                         : kernels::RopeStyle::kNeox;
  std::vector<RopeSpec> distinct;
  for (const LayerSpec& l : c.layers) {
    size_t i = std::find(distinct.begin(), distinct.end(), l.rope) - distinct.begin();
    if (i == distinct.size()) {
      distinct.push_back(l.rope);
      std::vector<double> inv(c.rope_dim / 2);
      kernels::RopeInvFreq(l.rope.freq_base, c.rope_dim, l.rope.freq_scale,
                           l.rope.freq_factors ? weights_.rope_freqs().data() : nullptr,
                           inv.data());
      rope_inv_freq_.push_back(std::move(inv));
    }
    layer_rope_.push_back(static_cast<int32_t>(i));
  }
  // Vectorized elementwise math on every fast path (chosen once: batch invariant).
  elementwise_ = options_.kernels != KernelChoice::kReference &&
                         kernels::ElementwiseSupported(kernels::ElementwiseImpl::kAvx512)
                     ? kernels::ElementwiseImpl::kAvx512
                     : kernels::ElementwiseImpl::kReference;
  // The int8 / AMX kernels take every matmul input rounded; a model whose weights are all
  // of unquantized types never needs it.
  // The layers' inputs and the LM head's may want different forms (kAmx: bf16 / int8).
  for (const LlamaLayerWeights& w : weights_.layers()) {
    for (const Linear* l : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down}) {
      forms_.q8 = forms_.q8 || l->wants_q8();
      forms_.bf16 = forms_.bf16 || l->wants_bf16();
    }
  }
  head_forms_ = weights_.lm_head().input_forms();
}

LlamaModel::~LlamaModel() = default;

KvPoolOptions LlamaModel::KvOptions(int32_t block_size, int32_t num_blocks) const {
  KvPoolOptions o;
  o.num_layers = config().num_layers;
  o.num_kv_heads = shard().num_kv_heads();
  o.head_dim = config().head_dim;
  o.block_size = block_size;
  o.num_blocks = num_blocks;
  o.dtype = options_.kv_dtype;
  return o;
}

absl::StatusOr<kernels::AttentionImpl> LlamaModel::AttentionImplFor(int32_t block_size) const {
  const int32_t hd = config().head_dim;
  switch (options_.kernels) {
    case KernelChoice::kReference:
      return kernels::AttentionImpl::kReference;
    case KernelChoice::kAuto:
      return kernels::BestAttentionImpl(block_size, hd);
    case KernelChoice::kAvx2:
      return kernels::AttentionImpl::kReference;
    case KernelChoice::kAmx:
    case KernelChoice::kAvx512Vnni:
    case KernelChoice::kAvx512:
    case KernelChoice::kPacked: {
      // The int8 paths also take int8 KV as integer products; the fp32 paths stay exact.
      const kernels::AttentionImpl impl = RoundsActivations(options_.kernels)
                                              ? kernels::AttentionImpl::kAvx512Vnni
                                              : kernels::AttentionImpl::kAvx512;
      if (!kernels::AttentionSupported(impl, block_size, hd)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "AVX-512 attention needs an AVX-512 CPU and block_size, head_dim multiples of 16"));
      }
      return impl;
    }
  }
  return absl::InternalError("bad kernel choice");
}

absl::Status LlamaModel::ValidateBatch(const ForwardBatch& batch, const KvCache& cache) const {
  const KvPoolOptions& co = cache.options();
  const KvPoolOptions want = KvOptions(co.block_size, co.num_blocks);
  if (co.num_layers != want.num_layers || co.num_kv_heads != want.num_kv_heads ||
      co.head_dim != want.head_dim || co.dtype != want.dtype) {
    return absl::FailedPreconditionError("KV cache shape does not match the model");
  }
  return weft::ValidateBatch(batch, BatchLimits{config().context_length, config().vocab_size,
                                                co.block_size, co.num_blocks});
}

void LlamaModel::PrepareBatch(const ForwardBatch& batch, int32_t block_size) {
  Workspace& ws = *ws_;
  const ModelConfig& c = config();
  const int64_t T = batch.num_tokens();
  ws.batch = &batch;
  ws.num_tokens = T;
  Grow(&ws.token_ids, T);
  Grow(&ws.positions, T);
  Grow(&ws.slots, T);
  ws.seq_offset.clear();
  ws.items.clear();
  ws.logit_tokens.clear();
  ws.logit_seqs.clear();
  int64_t t = 0;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceChunk& seq = batch.sequences[s];
    const int32_t n = static_cast<int32_t>(seq.token_ids.size());
    ws.seq_offset.push_back(t);
    for (int32_t i = 0; i < n; ++i, ++t) {
      const int32_t pos = seq.start_pos + i;
      ws.token_ids[t] = seq.token_ids[i];
      ws.positions[t] = pos;
      ws.slots[t] = int64_t{seq.block_table[pos / block_size]} * block_size + pos % block_size;
    }
    for (int32_t h = 0; h < shard().num_kv_heads(); ++h) {
      for (int32_t q0 = 0; q0 < n; q0 += kPrefillItemTokens) {
        ws.items.push_back({static_cast<int32_t>(s), h, q0, std::min(n, q0 + kPrefillItemTokens)});
      }
    }
    const int32_t num_logits = seq.num_logit_rows();
    for (int32_t i = num_logits; i > 0; --i) {
      ws.logit_tokens.push_back(t - i);
      ws.logit_seqs.push_back(static_cast<int32_t>(s));
    }
  }
  SplitSmallAttention();
  const int64_t hidden = c.hidden_size;
  const int64_t qw = int64_t{shard().num_heads()} * c.head_dim;
  const int64_t kvw = int64_t{shard().num_kv_heads()} * c.head_dim;
  const int64_t ffn = shard().num_ff();
  Grow(&ws.x, T * hidden);
  Grow(&ws.h, T * hidden);
  Grow(&ws.proj, T * hidden);
  Grow(&ws.q, T * qw);
  Grow(&ws.attn, T * qw);
  Grow(&ws.k, T * kvw);
  Grow(&ws.v, T * kvw);
  Grow(&ws.gate, T * ffn);
  Grow(&ws.up, T * ffn);
  ws.cos_sin.resize(rope_inv_freq_.size());
  for (std::vector<float>& cs : ws.cos_sin) Grow(&cs, T * c.rope_dim);
  Grow(&ws.final_h, ws.logit_tokens.size() * hidden);
  ws.q8_h.Resize(forms_, T, hidden);
  ws.q8_attn.Resize(forms_, T, qw);
  ws.q8_ffn.Resize(forms_, T, ffn);
  ws.q8_final.Resize(head_forms_, static_cast<int64_t>(ws.logit_tokens.size()), hidden);
}

// With few work items (one decoding sequence has one per KV head), threads would idle:
// split each item into its query heads. Each head's output is computed the same way
// either way (the kernels' rows are independent); only K/V reuse across the group is
// given up.
void LlamaModel::SplitSmallAttention() {
  Workspace& ws = *ws_;
  const int32_t group = config().queries_per_kv_head();
  if (group == 1 || ws.items.size() >= 4 * static_cast<size_t>(pool_.num_threads())) return;
  const size_t n = ws.items.size();
  for (size_t i = 0; i < n; ++i) {
    AttentionItem item = ws.items[i];
    for (int32_t g = 0; g < group; ++g) {
      item.group_begin = g;
      item.group_end = g + 1;
      if (g == 0) {
        ws.items[i] = item;
      } else {
        ws.items.push_back(item);
      }
    }
  }
}

void LlamaModel::ForTokens(absl::FunctionRef<void(int64_t, int64_t)> fn) {
  const int64_t T = ws_->num_tokens;
  if (T < kMinTokensToSplit || pool_.num_threads() == 1) {
    fn(0, T);
  } else {
    pool_.ParallelFor(T, 1, fn);
  }
}

void LlamaModel::Embed() {
  Workspace& ws = *ws_;
  const ModelConfig& c = config();
  const int64_t H = c.hidden_size;
  ForTokens([&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) weights_.Embed(ws.token_ids[t], ws.x.data() + t * H);
    if (c.embedding_scale != 1.0f) {
      for (int64_t i = b * H; i < e * H; ++i) ws.x[i] = ws.x[i] * c.embedding_scale;
    }
    for (size_t r = 0; r < rope_inv_freq_.size(); ++r) {
      kernels::RopeCosSin(ws.positions.data() + b, e - b, c.rope_dim, rope_inv_freq_[r].data(),
                          ws.cos_sin[r].data() + b * c.rope_dim);
    }
  });
}

absl::Status LlamaModel::Forward(const ForwardBatch& batch, KvCache* cache,
                                 ForwardOutput* out) {
  WEFT_RETURN_IF_ERROR(ValidateBatch(batch, *cache));
  WEFT_ASSIGN_OR_RETURN(const kernels::AttentionImpl attn,
                        AttentionImplFor(cache->block_size()));
  out->vocab_size = config().vocab_size;
  out->num_rows = 0;
  out->row_sequence.clear();
  if (batch.num_tokens() == 0) return absl::OkStatus();
  PrepareBatch(batch, cache->block_size());
  ws_->residual_pending = false;
  ws_->pending_norm = nullptr;
  Embed();
  for (int32_t l = 0; l < config().num_layers; ++l) {
    WEFT_RETURN_IF_ERROR(RunLayer(l, attn, cache));
  }
  ws_->batch = nullptr;
  return Logits(out);
}

absl::Status LlamaModel::RunLayer(int32_t layer, kernels::AttentionImpl attn, KvCache* cache) {
  Workspace& ws = *ws_;
  const LlamaLayerWeights& w = weights_.layers()[layer];
  const LayerSpec& spec = config().layers[layer];
  NormAndQuantize(w.attn_norm);
  const kernels::PagedKvLayer kv = cache->Layer(layer);
  QkvRopeAndWrite(layer, w, kv);
  Attention(attn, kv, spec.sliding_window);
  const int64_t qw = w.wo.in_features();
  QuantizeRows(ws.attn.data(), qw, &ws.q8_attn);
  WEFT_RETURN_IF_ERROR(
      ProjectAndAdd(w.wo, ws.q8_attn.Input(ws.attn.data(), qw), w.post_attn_norm));
  NormAndQuantize(w.ffn_norm);
  GateUp(w, spec.activation);
  const int64_t ffn = w.w_down.in_features();
  QuantizeRows(ws.gate.data(), ffn, &ws.q8_ffn);
  return ProjectAndAdd(w.w_down, ws.q8_ffn.Input(ws.gate.data(), ffn), w.post_ffn_norm);
}

void LlamaModel::NormAndQuantize(const std::vector<float>& norm) {
  Workspace& ws = *ws_;
  const ModelConfig& c = config();
  const int64_t H = c.hidden_size;
  const bool add = ws.residual_pending;
  ForTokens([&](int64_t b, int64_t e) {
    if (add) AddResidual(b, e);
    kernels::RmsNorm(ws.x.data() + b * H, H, norm.data(), e - b, H, c.rms_norm_eps,
                     ws.h.data() + b * H, H);
    ws.q8_h.Convert(ws.h.data(), H, b, e);
  });
  ws.residual_pending = false;
}

void LlamaModel::AddResidual(int64_t token_begin, int64_t token_end) {
  Workspace& ws = *ws_;
  const int64_t H = config().hidden_size;
  float* x = ws.x.data();
  float* y = ws.proj.data();
  if (ws.pending_norm != nullptr) {
    kernels::RmsNorm(y + token_begin * H, H, ws.pending_norm, token_end - token_begin, H,
                     config().rms_norm_eps, y + token_begin * H, H);
  }
  for (int64_t i = token_begin * H; i < token_end * H; ++i) x[i] = x[i] + y[i];
}

void LlamaModel::QuantizeRows(const float* x, int64_t ldx, ActivationBuffer* out) {
  if (!forms_.q8 && !forms_.bf16) return;
  ForTokens([&](int64_t b, int64_t e) { out->Convert(x, ldx, b, e); });
}

void LlamaModel::QkvRopeAndWrite(int32_t layer, const LlamaLayerWeights& w,
                                 const kernels::PagedKvLayer& kv) {
  Workspace& ws = *ws_;
  const ModelConfig& c = config();
  const std::vector<float>& cos_sin = ws.cos_sin[layer_rope_[layer]];
  const int64_t T = ws.num_tokens;
  const int64_t H = c.hidden_size;
  const int64_t qw = w.wq.out_features();
  const int64_t kvw = w.wk.out_features();
  pool_.RunOnAll([&](int t) {
    const std::pair<const Linear*, float*> jobs[] = {
        {&w.wq, ws.q.data()}, {&w.wk, ws.k.data()}, {&w.wv, ws.v.data()}};
    for (const auto& [lin, y] : jobs) {
      int64_t b, e;
      ThreadPool::StaticRange(lin->out_features(), kColumnAlign, pool_.num_threads(), t, &b, &e);
      lin->Compute(ws.q8_h.Input(ws.h.data(), H), T, y, lin->out_features(), b, e);
    }
  });
  const int64_t hd = c.head_dim;
  const int64_t nq = shard().num_heads(), nk = shard().num_kv_heads();
  ForTokens([&](int64_t b, int64_t e) {
    if (!w.q_bias.empty()) {
      const std::pair<const std::vector<float>*, float*> biases[] = {
          {&w.q_bias, ws.q.data()}, {&w.k_bias, ws.k.data()}, {&w.v_bias, ws.v.data()}};
      for (const auto& [bias, y] : biases) {
        const int64_t n = static_cast<int64_t>(bias->size());  // = the row width
        for (int64_t t = b; t < e; ++t) {
          for (int64_t j = 0; j < n; ++j) y[t * n + j] = y[t * n + j] + (*bias)[j];
        }
      }
    }
    if (!w.q_norm.empty()) {  // each head is a row of head_dim floats
      kernels::RmsNorm(ws.q.data() + b * qw, hd, w.q_norm.data(), (e - b) * nq, hd,
                       c.rms_norm_eps, ws.q.data() + b * qw, hd);
      kernels::RmsNorm(ws.k.data() + b * kvw, hd, w.k_norm.data(), (e - b) * nk, hd,
                       c.rms_norm_eps, ws.k.data() + b * kvw, hd);
    }
    const float* cs = cos_sin.data() + b * c.rope_dim;
    kernels::ApplyRope(rope_style_, cs, c.rope_dim, ws.q.data() + b * qw, qw, e - b, nq,
                       c.head_dim);
    kernels::ApplyRope(rope_style_, cs, c.rope_dim, ws.k.data() + b * kvw, kvw, e - b, nk,
                       c.head_dim);
    kernels::WritePagedKv(kv, ws.k.data(), ws.v.data(), kvw, ws.slots.data(), b, e);
  });
}

void LlamaModel::Attention(kernels::AttentionImpl impl, const kernels::PagedKvLayer& kv,
                           int32_t window) {
  Workspace& ws = *ws_;
  const int64_t qw = int64_t{shard().num_heads()} * config().head_dim;
  const float scale = config().attention_scale;
  pool_.ParallelForDynamic(static_cast<int64_t>(ws.items.size()), [&](int64_t i) {
    const AttentionItem& item = ws.items[i];
    const SequenceChunk& seq = ws.batch->sequences[item.seq];
    const int64_t off = ws.seq_offset[item.seq];
    kernels::AttentionParams p;
    p.num_heads = shard().num_heads();
    p.scale = scale;
    p.kv_head_begin = item.kv_head;
    p.kv_head_end = item.kv_head + 1;
    p.group_begin = item.group_begin;
    p.group_end = item.group_end;
    p.window = window;
    const float* q = ws.q.data() + off * qw;
    float* out = ws.attn.data() + off * qw;
    if (seq.token_ids.size() == 1) {
      kernels::PagedDecodeAttention(impl, q, kv, seq.block_table.data(), seq.start_pos + 1, p,
                                    out);
    } else {
      kernels::PagedPrefillAttention(impl, q, qw, seq.start_pos, item.q_begin, item.q_end, kv,
                                     seq.block_table.data(), p, out, qw);
    }
  });
}

absl::Status LlamaModel::ProjectAndAdd(const Linear& w, const LinearInput& in,
                                       const std::vector<float>& post_norm) {
  Workspace& ws = *ws_;
  const int64_t T = ws.num_tokens;
  const int64_t H = config().hidden_size;
  const bool reduce = options_.all_reducer != nullptr;
  pool_.RunOnAll([&](int t) {
    int64_t b, e;
    ThreadPool::StaticRange(H, kColumnAlign, pool_.num_threads(), t, &b, &e);
    w.Compute(in, T, ws.proj.data(), H, b, e);
  });
  if (reduce) WEFT_RETURN_IF_ERROR(options_.all_reducer->AllReduceSum(ws.proj.data(), T * H));
  // x += proj waits for the next token-wise pass (NormAndQuantize or Logits): each thread
  // then adds the rows it reads next, instead of a column range of every row.
  ws.residual_pending = true;
  ws.pending_norm = post_norm.empty() ? nullptr : post_norm.data();
  return absl::OkStatus();
}

void LlamaModel::GateUp(const LlamaLayerWeights& w, FfnActivation activation) {
  Workspace& ws = *ws_;
  const int64_t T = ws.num_tokens;
  const int64_t H = config().hidden_size;
  const int64_t F = w.w_gate.out_features();
  pool_.RunOnAll([&](int t) {
    int64_t b, e;
    ThreadPool::StaticRange(F, kColumnAlign, pool_.num_threads(), t, &b, &e);
    if (b >= e) return;
    const LinearInput in = ws.q8_h.Input(ws.h.data(), H);
    w.w_gate.Compute(in, T, ws.gate.data(), F, b, e);
    w.w_up.Compute(in, T, ws.up.data(), F, b, e);
    for (int64_t tok = 0; tok < T; ++tok) {
      float* g = ws.gate.data() + tok * F + b;
      const float* u = ws.up.data() + tok * F + b;
      if (activation == FfnActivation::kGeluTanh) {
        kernels::GeluTanhGlu(g, u, e - b, g);
      } else {
        kernels::SwiGlu(elementwise_, g, u, e - b, g);
      }
    }
  });
}

absl::Status LlamaModel::Logits(ForwardOutput* out) {
  Workspace& ws = *ws_;
  const ModelConfig& c = config();
  const int64_t H = c.hidden_size;
  const int64_t V = c.vocab_size;
  const int64_t rows = static_cast<int64_t>(ws.logit_tokens.size());
  out->num_rows = static_cast<int32_t>(rows);
  out->row_sequence.assign(ws.logit_seqs.begin(), ws.logit_seqs.end());
  if (rows == 0) return absl::OkStatus();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = ws.logit_tokens[r];
    if (ws.residual_pending) AddResidual(t, t + 1);
    kernels::RmsNorm(ws.x.data() + t * H, H, weights_.output_norm().data(), 1,
                     H, c.rms_norm_eps, ws.final_h.data() + r * H, H);
  }
  ws.q8_final.Convert(ws.final_h.data(), H, 0, rows);
  float* logits = Grow(&out->logits, rows * V);
  const Linear& head = weights_.lm_head();
  const int64_t Vr = head.out_features();  // this rank's vocabulary slice
  const bool tp = options_.all_reducer != nullptr;
  float* local = tp ? Grow(&ws.local_logits, rows * Vr) : logits;
  pool_.RunOnAll([&](int t) {
    int64_t b, e;
    ThreadPool::StaticRange(Vr, kColumnAlign, pool_.num_threads(), t, &b, &e);
    head.Compute(ws.q8_final.Input(ws.final_h.data(), H), rows, local, Vr, b, e);
  });
  if (tp) WEFT_RETURN_IF_ERROR(GatherLogits(rows, local, logits));
  if (c.final_logit_softcap > 0.0f) {
    const float cap = c.final_logit_softcap;
    for (int64_t i = 0; i < rows * V; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
  }
  return absl::OkStatus();
}

// Vocab-parallel LM head: gather every rank's [rows][slice] and put the slices side by
// side, so every rank holds the same full logits.
absl::Status LlamaModel::GatherLogits(int64_t rows, const float* local, float* logits) {
  Workspace& ws = *ws_;
  const int64_t V = config().vocab_size;
  const int64_t Vr = weights_.lm_head().out_features();
  std::vector<size_t>& counts = ws.gather_counts;
  counts.resize(vocab_slices_.size());
  for (size_t r = 0; r < counts.size(); ++r) {
    counts[r] = static_cast<size_t>(rows * (vocab_slices_[r].second - vocab_slices_[r].first));
  }
  float* gathered = Grow(&ws.gathered_logits, rows * V);
  WEFT_RETURN_IF_ERROR(
      options_.all_reducer->AllGatherV(local, static_cast<size_t>(rows * Vr), counts, gathered));
  for (const auto& [begin, end] : vocab_slices_) {
    const int64_t width = end - begin;
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(gathered + r * width, width, logits + r * V + begin);
    }
    gathered += rows * width;
  }
  return absl::OkStatus();
}

}  // namespace weft

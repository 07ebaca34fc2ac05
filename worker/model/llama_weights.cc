#include "worker/model/llama_weights.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace weft {
namespace {

absl::StatusOr<const GgufTensor*> Find(const GgufFile& file, const std::string& name) {
  const GgufTensor* t = file.FindTensor(name);
  if (t == nullptr) return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " is missing"));
  return t;
}

absl::StatusOr<std::vector<float>> LoadVector(const GgufFile& file, const std::string& name,
                                              int64_t size) {
  WEFT_ASSIGN_OR_RETURN(const GgufTensor* t, Find(file, name));
  if (t->ne.size() != 1 || t->ne[0] != size) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " must be [", size, "]"));
  }
  if (static_cast<int64_t>(t->nbytes) < RowBytes(t->type, size)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " is truncated"));
  }
  std::vector<float> out(size);
  absl::Status s = DequantizeRow(t->type, t->data, out.data(), size);
  if (!s.ok()) return absl::UnimplementedError(absl::StrCat("tensor ", name, ": ", s.message()));
  return out;
}

absl::StatusOr<Linear> LoadLinear(const GgufFile& file, const std::string& name, int64_t in,
                                  int64_t out, KernelChoice kernels,
                                  const std::shared_ptr<PackedArena>& arena) {
  WEFT_ASSIGN_OR_RETURN(const GgufTensor* t, Find(file, name));
  return Linear::FromTensor(*t, in, out, kernels, arena);
}


absl::StatusOr<LlamaLayerWeights> LoadLayerMatrices(
    const GgufFile& file, const LlamaConfig& c, const ShardSpec& s, int32_t l,
    KernelChoice kernels, const std::shared_ptr<PackedArena>& arena) {
  const std::string p = absl::StrCat("blk.", l, ".");
  const int64_t hd = c.head_dim;
  LlamaLayerWeights w;
  WEFT_ASSIGN_OR_RETURN(w.attn_norm, LoadVector(file, p + "attn_norm.weight", c.hidden_size));
  WEFT_ASSIGN_OR_RETURN(w.ffn_norm, LoadVector(file, p + "ffn_norm.weight", c.hidden_size));
  // Under TP the full matrices are only views to slice: pack (if at all) the slices.
  const KernelChoice load_kernels = s.world_size == 1 ? kernels : KernelChoice::kReference;
  WEFT_ASSIGN_OR_RETURN(Linear q, LoadLinear(file, p + "attn_q.weight", c.hidden_size,
                                             c.num_heads * hd, load_kernels, arena));
  WEFT_ASSIGN_OR_RETURN(Linear k, LoadLinear(file, p + "attn_k.weight", c.hidden_size,
                                             c.num_kv_heads * hd, load_kernels, arena));
  WEFT_ASSIGN_OR_RETURN(Linear v, LoadLinear(file, p + "attn_v.weight", c.hidden_size,
                                             c.num_kv_heads * hd, load_kernels, arena));
  WEFT_ASSIGN_OR_RETURN(Linear o, LoadLinear(file, p + "attn_output.weight", c.num_heads * hd,
                                             c.hidden_size, load_kernels, arena));
  WEFT_ASSIGN_OR_RETURN(Linear gate, LoadLinear(file, p + "ffn_gate.weight", c.hidden_size,
                                                c.ffn_size, load_kernels, arena));
  WEFT_ASSIGN_OR_RETURN(Linear up, LoadLinear(file, p + "ffn_up.weight", c.hidden_size,
                                              c.ffn_size, load_kernels, arena));
  WEFT_ASSIGN_OR_RETURN(Linear down, LoadLinear(file, p + "ffn_down.weight", c.ffn_size,
                                                c.hidden_size, load_kernels, arena));
  if (s.world_size == 1) {
    w.wq = std::move(q);
    w.wk = std::move(k);
    w.wv = std::move(v);
    w.wo = std::move(o);
    w.w_gate = std::move(gate);
    w.w_up = std::move(up);
    w.w_down = std::move(down);
    return w;
  }
  const struct {
    const Linear* full;
    Linear* out;
    bool rows;  // slice output features (else input features)
    int64_t begin, end;
  } slices[] = {
      {&q, &w.wq, true, s.head_begin * hd, s.head_end * hd},
      {&k, &w.wk, true, s.kv_begin * hd, s.kv_end * hd},
      {&v, &w.wv, true, s.kv_begin * hd, s.kv_end * hd},
      {&o, &w.wo, false, s.head_begin * hd, s.head_end * hd},
      {&gate, &w.w_gate, true, s.ff_begin, s.ff_end},
      {&up, &w.w_up, true, s.ff_begin, s.ff_end},
      {&down, &w.w_down, false, s.ff_begin, s.ff_end},
  };
  for (const auto& sl : slices) {
    WEFT_ASSIGN_OR_RETURN(Linear part, sl.rows ? sl.full->RowSlice(sl.begin, sl.end)
                                               : sl.full->ColSlice(sl.begin, sl.end));
    WEFT_ASSIGN_OR_RETURN(*sl.out, part.WithKernels(kernels));
  }
  return w;
}

// Loads layer l; the GGUF pages of matrices that were packed are handed back to the
// kernel (they are never read again, and would otherwise stay resident twice).
absl::StatusOr<LlamaLayerWeights> LoadLayer(const GgufFile& file, const LlamaConfig& c,
                                            const ShardSpec& s, int32_t l, KernelChoice kernels,
                                            const std::shared_ptr<PackedArena>& arena) {
  WEFT_ASSIGN_OR_RETURN(LlamaLayerWeights w, LoadLayerMatrices(file, c, s, l, kernels, arena));
  const std::pair<const char*, const Linear*> matrices[] = {
      {"attn_q", &w.wq},      {"attn_k", &w.wk},   {"attn_v", &w.wv},
      {"attn_output", &w.wo}, {"ffn_gate", &w.w_gate}, {"ffn_up", &w.w_up},
      {"ffn_down", &w.w_down}};
  for (const auto& [name, lin] : matrices) {
    if (!lin->packed()) continue;
    const GgufTensor* t = file.FindTensor(absl::StrCat("blk.", l, ".", name, ".weight"));
    if (t != nullptr) file.ReleasePages(t->offset, t->nbytes);
  }
  return w;
}

}  // namespace

absl::StatusOr<ShardSpec> ShardSpec::Compute(const LlamaConfig& config, int32_t world_size,
                                             int32_t rank) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("bad rank ", rank, " of ", world_size));
  }
  if (world_size > 1 && config.head_dim % 32 != 0) {
    return absl::InvalidArgumentError("tensor parallelism needs head_dim to be a multiple of 32");
  }
  WEFT_ASSIGN_OR_RETURN(const ShardLayout layout,
                        ComputeShardLayout(config.num_heads, config.num_kv_heads, config.ffn_size,
                                           config.vocab_size, world_size, rank));
  ShardSpec s;
  static_cast<ShardLayout&>(s) = layout;
  return s;
}

absl::StatusOr<LlamaWeights> LlamaWeights::Load(const GgufFile& file, const LlamaConfig& config,
                                                const ShardSpec& shard, KernelChoice kernels) {
  LlamaWeights w;
  w.config_ = config;
  w.shard_ = shard;
  WEFT_ASSIGN_OR_RETURN(w.token_embd_, Find(file, "token_embd.weight"));
  w.embd_row_bytes_ = RowBytes(w.token_embd_->type, config.hidden_size);
  const GgmlTypeTraits* traits = GetGgmlTypeTraits(static_cast<uint32_t>(w.token_embd_->type));
  if (traits == nullptr || !traits->dequantizable ||
      config.hidden_size % traits->block_size != 0) {
    return absl::UnimplementedError(absl::StrCat(
        "tensor token_embd.weight: type ", GgmlTypeName(static_cast<uint32_t>(w.token_embd_->type)),
        " is not supported with rows of ", config.hidden_size));
  }
  if (static_cast<uint64_t>(w.embd_row_bytes_) * config.vocab_size > w.token_embd_->nbytes) {
    return absl::InvalidArgumentError("tensor token_embd.weight is truncated");
  }
  WEFT_ASSIGN_OR_RETURN(w.output_norm_,
                        LoadVector(file, "output_norm.weight", config.hidden_size));
  const std::string head = config.tied_embeddings ? "token_embd.weight" : "output.weight";
  // One arena for every packed matrix: huge pages for the small ones too.
  const auto arena = std::make_shared<PackedArena>();
  for (int32_t l = 0; l < config.num_layers; ++l) {
    WEFT_ASSIGN_OR_RETURN(LlamaLayerWeights layer,
                          LoadLayer(file, config, shard, l, kernels, arena));
    w.layers_.push_back(std::move(layer));
  }
  const KernelChoice head_kernels = LmHeadKernelChoice(kernels);
  if (shard.world_size == 1) {
    WEFT_ASSIGN_OR_RETURN(w.lm_head_, LoadLinear(file, head, config.hidden_size,
                                                 config.vocab_size, head_kernels, arena));
    return w;
  }
  // Vocab-parallel: pack only this rank's rows.
  WEFT_ASSIGN_OR_RETURN(const Linear full, LoadLinear(file, head, config.hidden_size,
                                                      config.vocab_size, KernelChoice::kReference,
                                                      arena));
  WEFT_ASSIGN_OR_RETURN(const Linear part, full.RowSlice(shard.vocab_begin, shard.vocab_end));
  WEFT_ASSIGN_OR_RETURN(w.lm_head_, part.WithKernels(head_kernels));
  return w;
}

void LlamaWeights::Embed(int32_t token, float* out) const {
  DCHECK(token >= 0 && token < config_.vocab_size);
  const absl::Status s = DequantizeRow(token_embd_->type,
                                       token_embd_->data + token * embd_row_bytes_, out,
                                       config_.hidden_size);
  DCHECK(s.ok()) << s;
}

}  // namespace weft

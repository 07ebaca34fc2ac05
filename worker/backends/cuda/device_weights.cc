#include "worker/backends/cuda/device_weights.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/ggml_types.h"
#include "common/status_macros.h"
#include "kernels/cuda/quant.h"
#include "kernels/cuda/quant_repack.h"

namespace weft::cuda_backend {
namespace {

namespace kc = ::weft::kernels::cuda;

bool DeviceCanDequantize(GgmlType t) {
  switch (t) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

template <typename T>
absl::Status UploadVector(const std::vector<T>& v, DeviceBuffer* out) {
  WEFT_RETURN_IF_ERROR(out->Allocate(v.size() * sizeof(T)));
  if (!v.empty()) {
    WEFT_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(out->get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  return absl::OkStatus();
}

}  // namespace

void DeviceWeights::NoteType(GgmlType t) {
  const std::string name = absl::AsciiStrToLower(GgmlTypeName(static_cast<uint32_t>(t)));
  if (absl::StrContains(absl::StrCat(",", types_, ","), absl::StrCat(",", name, ","))) return;
  absl::StrAppend(&types_, types_.empty() ? "" : ",", name);
}

absl::Status DeviceWeights::UploadFloats(const std::vector<float>& v, DeviceBuffer* out) {
  WEFT_RETURN_IF_ERROR(UploadVector(v, out));
  device_bytes_ += static_cast<int64_t>(out->bytes());
  return absl::OkStatus();
}

absl::Status DeviceWeights::DequantInto(const QuantMatrix& m, void* dst,
                                        cudaStream_t stream) {
  if (!DeviceCanDequantize(m.type) || m.k % 32 != 0 ||
      m.k % kc::BlockWeights(static_cast<kc::WeightType>(m.type)) != 0) {
    return absl::UnimplementedError(absl::StrCat(
        "the CUDA backend cannot dequantize a ", GgmlTypeName(static_cast<uint32_t>(m.type)),
        " matrix with rows of ", m.k));
  }
  NoteType(m.type);
  const int64_t row_bytes = RowBytes(m.type, m.k);
  WEFT_RETURN_IF_ERROR(staging_.Reserve(static_cast<size_t>(row_bytes * m.n)));
  // Rows may be a column slice of a wider matrix (row_stride > row_bytes): a 2-D copy
  // packs them. The source is pageable (mmap), so the copy is synchronous.
  WEFT_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(staging_.get(), row_bytes, m.data, m.row_stride,
                                              row_bytes, m.n, cudaMemcpyHostToDevice, stream));
  WEFT_CUDA_RETURN_IF_ERROR(kc::DequantizeWeights(static_cast<kc::WeightType>(m.type),
                                                  staging_.get(), row_bytes, m.n, m.k, dst,
                                                  kc::WeightDtype::kBf16, stream));
  // staging_ is reused by the next matrix.
  WEFT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

absl::Status DeviceWeights::UploadGemv(const std::vector<const QuantMatrix*>& parts,
                                       DeviceLinear* out) {
  // Parts of one type are merged into one matrix (one launch); parts of different types
  // (a mixed file) stay separate, one GEMV each.
  bool one_type = true;
  for (const QuantMatrix* p : parts) one_type = one_type && p->type == parts[0]->type;
  std::vector<kc::RepackedMatrix> groups;
  for (const QuantMatrix* p : parts) {
    const auto type = static_cast<kc::WeightType>(p->type);
    kc::RepackedMatrix r;
    if (!kc::HasGemv(type) || !kc::RepackForGemv(type, p->data, p->row_stride, p->n, p->k, &r)) {
      return absl::OkStatus();  // e.g. an unquantized part: GEMMs only
    }
    if (one_type && !groups.empty()) {
      kc::RepackedMatrix& all = groups.back();
      all.n += r.n;
      all.qs.insert(all.qs.end(), r.qs.begin(), r.qs.end());
      all.d.insert(all.d.end(), r.d.begin(), r.d.end());
      all.m.insert(all.m.end(), r.m.begin(), r.m.end());
    } else {
      groups.push_back(std::move(r));
    }
  }
  std::vector<uint8_t> qs;
  std::vector<uint16_t> d, m;
  struct Offsets {
    size_t qs, d, m;
  };
  std::vector<Offsets> offsets;
  for (const kc::RepackedMatrix& g : groups) {
    // The repacked layout loads 16-byte vectors: every part starts 16-byte aligned.
    qs.resize((qs.size() + 15) / 16 * 16, 0);
    offsets.push_back({qs.size(), d.size(), m.size()});
    qs.insert(qs.end(), g.qs.begin(), g.qs.end());
    d.insert(d.end(), g.d.begin(), g.d.end());
    m.insert(m.end(), g.m.begin(), g.m.end());
  }
  WEFT_RETURN_IF_ERROR(UploadVector(qs, &out->gemv_qs));
  WEFT_RETURN_IF_ERROR(UploadVector(d, &out->gemv_d));
  WEFT_RETURN_IF_ERROR(UploadVector(m, &out->gemv_m));
  device_bytes_ += static_cast<int64_t>(out->gemv_qs.bytes() + out->gemv_d.bytes() +
                                        out->gemv_m.bytes());
  out->gemv_parts.clear();
  int64_t row0 = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    const kc::RepackedMatrix& g = groups[i];
    const kc::GemvWeights w{g.type, out->gemv_qs.as<uint8_t>() + offsets[i].qs,
                            g.d.empty() ? nullptr : out->gemv_d.as<uint16_t>() + offsets[i].d,
                            g.m.empty() ? nullptr : out->gemv_m.as<uint16_t>() + offsets[i].m,
                            g.n, g.k};
    out->gemv_parts.push_back({row0, w});
    row0 += g.n;
  }
  out->gemv = out->gemv_parts[0].weights;
  out->has_gemv = true;
  return absl::OkStatus();
}

absl::Status DeviceWeights::UploadLinear(const std::vector<const QuantMatrix*>& parts,
                                         const DeviceWeightsOptions& options,
                                         cudaStream_t stream, DeviceLinear* out) {
  out->k = parts[0]->k;
  out->n = 0;
  for (const QuantMatrix* p : parts) {
    if (p->k != out->k) return absl::InternalError("fused matrices with different row lengths");
    out->n += p->n;
  }
  WEFT_RETURN_IF_ERROR(out->dense_owner.Allocate(static_cast<size_t>(out->n * out->k * 2)));
  device_bytes_ += static_cast<int64_t>(out->dense_owner.bytes());
  out->dense = out->dense_owner.get();
  int64_t row = 0;
  for (const QuantMatrix* p : parts) {
    WEFT_RETURN_IF_ERROR(DequantInto(*p, out->dense_owner.as<uint8_t>() + row * out->k * 2,
                                     stream));
    row += p->n;
  }
  if (options.gemv_copies) WEFT_RETURN_IF_ERROR(UploadGemv(parts, out));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceWeights>> DeviceWeights::Upload(
    const GgufFile& file, const LlamaWeights& host, const DeviceWeightsOptions& options,
    cudaStream_t stream) {
  std::unique_ptr<DeviceWeights> w(new DeviceWeights());
  const LlamaConfig& c = host.config();
  const GgufTensor* embd = file.FindTensor("token_embd.weight");
  if (embd == nullptr) return absl::InvalidArgumentError("tensor token_embd.weight is missing");
  const QuantMatrix embd_matrix{embd->type, embd->data, c.vocab_size, c.hidden_size,
                                         RowBytes(embd->type, c.hidden_size)};
  WEFT_RETURN_IF_ERROR(
      w->embedding_.Allocate(static_cast<size_t>(int64_t{c.vocab_size} * c.hidden_size * 2)));
  w->device_bytes_ += static_cast<int64_t>(w->embedding_.bytes());
  WEFT_RETURN_IF_ERROR(w->DequantInto(embd_matrix, w->embedding_.get(), stream));
  WEFT_RETURN_IF_ERROR(w->UploadFloats(host.output_norm(), &w->output_norm_));
  for (const LlamaLayerWeights& hl : host.layers()) {
    DeviceLayer l;
    WEFT_RETURN_IF_ERROR(w->UploadFloats(hl.attn_norm, &l.attn_norm));
    WEFT_RETURN_IF_ERROR(w->UploadFloats(hl.ffn_norm, &l.ffn_norm));
    WEFT_RETURN_IF_ERROR(w->UploadLinear(
        {&hl.wq.matrix(), &hl.wk.matrix(), &hl.wv.matrix()}, options, stream, &l.qkv));
    WEFT_RETURN_IF_ERROR(w->UploadLinear({&hl.wo.matrix()}, options, stream, &l.o));
    WEFT_RETURN_IF_ERROR(w->UploadLinear({&hl.w_gate.matrix(), &hl.w_up.matrix()}, options,
                                         stream, &l.gate_up));
    WEFT_RETURN_IF_ERROR(w->UploadLinear({&hl.w_down.matrix()}, options, stream, &l.down));
    w->layers_.push_back(std::move(l));
  }
  const QuantMatrix& head = host.lm_head().matrix();
  if (c.tied_embeddings) {
    w->lm_head_.n = c.vocab_size;
    w->lm_head_.k = c.hidden_size;
    w->lm_head_.dense = w->embedding_.get();
    if (options.gemv_copies) WEFT_RETURN_IF_ERROR(w->UploadGemv({&head}, &w->lm_head_));
  } else {
    WEFT_RETURN_IF_ERROR(w->UploadLinear({&head}, options, stream, &w->lm_head_));
  }
  w->staging_.Reset();
  return w;
}

}  // namespace weft::cuda_backend

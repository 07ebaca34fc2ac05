#include "kernels/cuda/quant_repack.h"

#include <cstdlib>
#include <cstring>

#include "common/ggml_types.h"

namespace weft::kernels::cuda {

static_assert(static_cast<uint32_t>(WeightType::kF32) == static_cast<uint32_t>(GgmlType::kF32));
static_assert(static_cast<uint32_t>(WeightType::kF16) == static_cast<uint32_t>(GgmlType::kF16));
static_assert(static_cast<uint32_t>(WeightType::kQ4_0) == static_cast<uint32_t>(GgmlType::kQ4_0));
static_assert(static_cast<uint32_t>(WeightType::kQ4_1) == static_cast<uint32_t>(GgmlType::kQ4_1));
static_assert(static_cast<uint32_t>(WeightType::kQ8_0) == static_cast<uint32_t>(GgmlType::kQ8_0));
static_assert(static_cast<uint32_t>(WeightType::kBF16) == static_cast<uint32_t>(GgmlType::kBF16));
static_assert(static_cast<uint32_t>(WeightType::kQ5_0) == static_cast<uint32_t>(GgmlType::kQ5_0));
static_assert(static_cast<uint32_t>(WeightType::kQ5_1) == static_cast<uint32_t>(GgmlType::kQ5_1));
static_assert(static_cast<uint32_t>(WeightType::kQ4_K) == static_cast<uint32_t>(GgmlType::kQ4_K));
static_assert(static_cast<uint32_t>(WeightType::kQ5_K) == static_cast<uint32_t>(GgmlType::kQ5_K));
static_assert(static_cast<uint32_t>(WeightType::kQ6_K) == static_cast<uint32_t>(GgmlType::kQ6_K));
static_assert(GgufRowBytes(WeightType::kQ5_0, 32) == sizeof(BlockQ5_0));
static_assert(GgufRowBytes(WeightType::kQ5_1, 32) == sizeof(BlockQ5_1));
static_assert(GgufRowBytes(WeightType::kQ4_K, 256) == sizeof(BlockQ4_K));
static_assert(GgufRowBytes(WeightType::kQ5_K, 256) == sizeof(BlockQ5_K));
static_assert(GgufRowBytes(WeightType::kQ6_K, 256) == sizeof(BlockQ6_K));

bool RepackForGemv(WeightType type, const uint8_t* src, int64_t row_stride, int64_t n,
                   int64_t k, RepackedMatrix* out) {
  if (!HasGemv(type) || k <= 0 || k % BlockWeights(type) != 0 || n < 0) return false;
  if (IsRawGemvType(type)) {  // the GGUF rows, packed
    const int64_t row_bytes = GgufRowBytes(type, k);
    out->type = type;
    out->n = n;
    out->k = k;
    out->qs.resize(n * row_bytes);
    for (int64_t j = 0; j < n; ++j) {
      std::memcpy(out->qs.data() + j * row_bytes, src + j * row_stride, row_bytes);
    }
    out->d.clear();
    out->m.clear();
    return true;
  }
  const int64_t blocks = k / kQK;
  out->type = type;
  out->n = n;
  out->k = k;
  const int64_t qs_per_block = type == WeightType::kQ8_0 ? kQK : kQK / 2;
  out->qs.assign(n * blocks * qs_per_block, 0);
  out->d.assign(n * blocks, 0);
  out->m.assign(type == WeightType::kQ4_1 ? n * blocks : 0, 0);
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = src + j * row_stride;
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* qs = out->qs.data() + (j * blocks + b) * qs_per_block;
      const int64_t i = j * blocks + b;
      switch (type) {
        case WeightType::kQ4_0: {
          BlockQ4_0 blk;
          std::memcpy(&blk, row + b * sizeof(blk), sizeof(blk));
          out->d[i] = blk.d;
          std::memcpy(qs, blk.qs, sizeof(blk.qs));
          break;
        }
        case WeightType::kQ4_1: {
          BlockQ4_1 blk;
          std::memcpy(&blk, row + b * sizeof(blk), sizeof(blk));
          out->d[i] = blk.d;
          out->m[i] = blk.m;
          std::memcpy(qs, blk.qs, sizeof(blk.qs));
          break;
        }
        default: {
          BlockQ8_0 blk;
          std::memcpy(&blk, row + b * sizeof(blk), sizeof(blk));
          out->d[i] = blk.d;
          std::memcpy(qs, blk.qs, sizeof(blk.qs));
          break;
        }
      }
    }
  }
  return true;
}

void GemvReference(const RepackedMatrix& w, const float* x, int64_t ldx, int64_t m, float* y,
                   int64_t ldy) {
  const int64_t blocks = w.k / kQK;
  std::vector<float> row(w.k);
  for (int64_t j = 0; j < w.n; ++j) {
    if (IsRawGemvType(w.type)) {
      const int64_t row_bytes = GgufRowBytes(w.type, w.k);
      const absl::Status s = DequantizeRow(static_cast<GgmlType>(w.type),
                                           w.qs.data() + j * row_bytes, row.data(), w.k);
      if (!s.ok()) std::abort();  // RepackForGemv accepted the type and k
    }
    for (int64_t b = 0; b < blocks && !IsRawGemvType(w.type); ++b) {
      const int64_t i = j * blocks + b;
      const float d = Fp16ToFp32(w.d[i]);
      float* out = row.data() + b * kQK;
      if (w.type == WeightType::kQ8_0) {
        const auto* q = reinterpret_cast<const int8_t*>(w.qs.data() + i * kQK);
        for (int e = 0; e < kQK; ++e) out[e] = d * q[e];
        continue;
      }
      const uint8_t* q = w.qs.data() + i * (kQK / 2);
      const float mn = w.type == WeightType::kQ4_1 ? Fp16ToFp32(w.m[i]) : 0.0f;
      for (int e = 0; e < kQK / 2; ++e) {
        const int lo = q[e] & 0x0f, hi = q[e] >> 4;
        if (w.type == WeightType::kQ4_0) {
          out[e] = d * (lo - 8);
          out[e + kQK / 2] = d * (hi - 8);
        } else {
          out[e] = d * lo + mn;
          out[e + kQK / 2] = d * hi + mn;
        }
      }
    }
    for (int64_t r = 0; r < m; ++r) {
      float acc = 0.0f;
      for (int64_t c = 0; c < w.k; ++c) acc = acc + x[r * ldx + c] * row[c];
      y[r * ldy + j] = acc;
    }
  }
}

}  // namespace weft::kernels::cuda

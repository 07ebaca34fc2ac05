#include "worker/model/testing/tiny_llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/testing/gguf_builder.h"
#include "glog/logging.h"

namespace weft::testing {
namespace {

void Put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// Random weights of magnitude about `s` encoded as `type` (rows of k).
std::vector<uint8_t> RandomMatrix(GgmlType type, int64_t rows, int64_t k, float s,
                                  std::mt19937* rng) {
  std::uniform_real_distribution<float> u(-s, s);
  std::uniform_int_distribution<int> byte(0, 255);
  const int64_t row_bytes = RowBytes(type, k);
  std::vector<uint8_t> out(rows * row_bytes);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = out.data() + r * row_bytes;
    for (int64_t i = 0; i < row_bytes; ++i) row[i] = static_cast<uint8_t>(byte(*rng));
    for (int64_t c = 0; c < k; ++c) {
      switch (type) {
        case GgmlType::kF32: {
          const float f = u(*rng);
          std::memcpy(row + 4 * c, &f, 4);
          break;
        }
        case GgmlType::kF16:
          Put16(row + 2 * c, Fp32ToFp16(u(*rng)));
          break;
        case GgmlType::kBF16:
          Put16(row + 2 * c, Fp32ToBf16(u(*rng)));
          break;
        default:
          break;
      }
    }
    // One jitter per 32 weights (per 256 for K-quants; the draws of the other types are
    // as they always were).
    const int64_t block =
        std::max<int64_t>(kQK, GetGgmlTypeTraits(static_cast<uint32_t>(type))->block_size);
    for (int64_t b = 0; b < k / block; ++b) {
      const float jitter = 0.5f + std::fabs(u(*rng)) / s;
      uint8_t* blk = row + b * RowBytes(type, block);
      switch (type) {
        case GgmlType::kQ5_0:
          Put16(blk, Fp32ToFp16(s * jitter / 16));
          break;
        case GgmlType::kQ5_1:
          Put16(blk, Fp32ToFp16(2 * s * jitter / 31));
          Put16(blk + 2, Fp32ToFp16(-s * jitter));
          break;
        case GgmlType::kQ4_K:  // w = d*sc*q - dmin*mn, sc and mn 0..63 (random bytes)
        case GgmlType::kQ5_K:
          Put16(blk, Fp32ToFp16(2 * s * jitter / (63 * (type == GgmlType::kQ4_K ? 15 : 31))));
          Put16(blk + 2, Fp32ToFp16(s * jitter / 63));
          break;
        case GgmlType::kQ6_K:  // w = d*sc*(q - 32), sc -128..127
          Put16(blk + 208, Fp32ToFp16(s * jitter / (64 * 32)));
          break;
        default:
          break;
      }
      if (block != kQK) continue;
      switch (type) {
        case GgmlType::kQ4_0:
          Put16(row + 18 * b, Fp32ToFp16(s * jitter / 8));
          break;
        case GgmlType::kQ4_1:
          Put16(row + 20 * b, Fp32ToFp16(2 * s * jitter / 15));
          Put16(row + 20 * b + 2, Fp32ToFp16(-s * jitter));
          break;
        case GgmlType::kQ8_0:
          Put16(row + 34 * b, Fp32ToFp16(s * jitter / 127));
          break;
        default:
          break;
      }
    }
  }
  return out;
}

std::vector<uint8_t> ToF32(GgmlType type, const std::vector<uint8_t>& bytes, int64_t rows,
                           int64_t k) {
  std::vector<uint8_t> out(rows * k * 4);
  for (int64_t r = 0; r < rows; ++r) {
    CHECK(DequantizeRow(type, bytes.data() + r * RowBytes(type, k),
                        reinterpret_cast<float*>(out.data()) + r * k, k)
              .ok());
  }
  return out;
}

}  // namespace

std::vector<uint8_t> BuildTinyLlama(const TinyLlamaSpec& spec) {
  std::mt19937 rng(spec.seed);
  GgufBuilder b;
  const std::string a = spec.architecture;
  b.AddString("general.architecture", a);
  b.AddString("general.name", "tiny");
  b.AddUint32(a + ".block_count", spec.num_layers);
  b.AddUint32(a + ".context_length", spec.context);
  b.AddUint32(a + ".embedding_length", spec.hidden);
  b.AddUint32(a + ".feed_forward_length", spec.ffn);
  b.AddUint32(a + ".attention.head_count", spec.num_heads);
  b.AddUint32(a + ".attention.head_count_kv", spec.num_kv_heads);
  b.AddFloat32(a + ".rope.freq_base", spec.rope_base);
  b.AddFloat32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  const int64_t hd = spec.hidden / spec.num_heads;
  auto type_of = [&](const std::string& name) {
    for (const auto& [key, type] : spec.tensor_types) {
      const std::string suffix = "." + key;
      if (name == key || (name.size() > suffix.size() &&
                          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)) {
        return type;
      }
    }
    return spec.matrix_type;
  };
  auto matrix = [&](const std::string& name, int64_t k, int64_t n, float s) {
    const GgmlType type = type_of(name);
    std::vector<uint8_t> bytes = RandomMatrix(type, n, k, s, &rng);
    if (name == spec.omit_tensor) return;
    if (spec.f32_twin) {
      b.AddTensor(name, {uint64_t(k), uint64_t(n)}, 0, ToF32(type, bytes, n, k));
    } else {
      b.AddTensor(name, {uint64_t(k), uint64_t(n)}, uint32_t(type), bytes);
    }
  };
  auto norm = [&](const std::string& name) {
    std::uniform_real_distribution<float> u(0.8f, 1.2f);
    std::vector<float> w(spec.hidden);
    for (float& x : w) x = u(rng);
    std::vector<uint8_t> bytes(w.size() * 4);
    std::memcpy(bytes.data(), w.data(), bytes.size());
    if (name != spec.omit_tensor) b.AddTensor(name, {uint64_t(spec.hidden)}, 0, bytes);
  };
  const float sh = 1.7f / std::sqrt(float(spec.hidden));
  matrix("token_embd.weight", spec.hidden, spec.vocab, 1.0f);
  norm("output_norm.weight");
  if (!spec.tied) matrix("output.weight", spec.hidden, spec.vocab, sh);
  for (int32_t l = 0; l < spec.num_layers; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    norm(p + "attn_norm.weight");
    matrix(p + "attn_q.weight", spec.hidden, spec.num_heads * hd, sh);
    matrix(p + "attn_k.weight", spec.hidden, spec.num_kv_heads * hd, sh);
    matrix(p + "attn_v.weight", spec.hidden, spec.num_kv_heads * hd, sh);
    matrix(p + "attn_output.weight", spec.num_heads * hd, spec.hidden, sh);
    norm(p + "ffn_norm.weight");
    matrix(p + "ffn_gate.weight", spec.hidden, spec.ffn, sh);
    matrix(p + "ffn_up.weight", spec.hidden, spec.ffn, sh);
    matrix(p + "ffn_down.weight", spec.ffn, spec.hidden, 1.7f / std::sqrt(float(spec.ffn)));
  }
  return b.Build();
}

}  // namespace weft::testing

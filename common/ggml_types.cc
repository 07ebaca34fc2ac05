#include "common/ggml_types.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace weft {
namespace {

struct TypeEntry {
  uint32_t id;
  GgmlTypeTraits traits;
};

// Every type a GGUF may hold (block sizes as ggml's type traits; tools/refdata's
// ggml_quant_ref checks them against ggml's own table): the reader sizes tensors of any
// of them, and DequantizeRow (hence the matmul kernels) supports those marked true.
constexpr TypeEntry kTypes[] = {
    {0, {"F32", 1, 4, true}},          {1, {"F16", 1, 2, true}},
    {2, {"Q4_0", 32, 18, true}},       {3, {"Q4_1", 32, 20, true}},
    {6, {"Q5_0", 32, 22, true}},       {7, {"Q5_1", 32, 24, true}},
    {8, {"Q8_0", 32, 34, true}},       {9, {"Q8_1", 32, 36, false}},
    {10, {"Q2_K", 256, 84, false}},    {11, {"Q3_K", 256, 110, false}},
    {12, {"Q4_K", 256, 144, true}},    {13, {"Q5_K", 256, 176, true}},
    {14, {"Q6_K", 256, 210, true}},    {15, {"Q8_K", 256, 292, false}},
    {16, {"IQ2_XXS", 256, 66, false}}, {17, {"IQ2_XS", 256, 74, false}},
    {18, {"IQ3_XXS", 256, 98, false}}, {19, {"IQ1_S", 256, 50, false}},
    {20, {"IQ4_NL", 32, 18, false}},   {21, {"IQ3_S", 256, 110, false}},
    {22, {"IQ2_S", 256, 82, false}},   {23, {"IQ4_XS", 256, 136, false}},
    {24, {"I8", 1, 1, false}},         {25, {"I16", 1, 2, false}},
    {26, {"I32", 1, 4, false}},        {27, {"I64", 1, 8, false}},
    {28, {"F64", 1, 8, false}},        {29, {"IQ1_M", 256, 56, false}},
    {30, {"BF16", 1, 2, true}},        {34, {"TQ1_0", 256, 54, false}},
    {35, {"TQ2_0", 256, 66, false}},   {39, {"MXFP4", 32, 17, false}},
};

}  // namespace

const GgmlTypeTraits* GetGgmlTypeTraits(uint32_t type) {
  for (const TypeEntry& e : kTypes) {
    if (e.id == type) return &e.traits;
  }
  return nullptr;
}

std::string GgmlTypeName(uint32_t type) {
  const GgmlTypeTraits* t = GetGgmlTypeTraits(type);
  return t != nullptr ? t->name : absl::StrCat("type#", type);
}

float Fp16ToFp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t Fp32ToFp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow
  if (abs < 0x38800000u) {  // subnormal or zero in half
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14 - (e - 112)
    uint32_t half = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((abs >> 13) - (112u << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

uint16_t Fp32ToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

int64_t RowBytes(GgmlType type, int64_t n) {
  const GgmlTypeTraits* t = GetGgmlTypeTraits(static_cast<uint32_t>(type));
  if (t == nullptr) return -1;
  return n / t->block_size * t->type_size;
}

void KQuantScaleMin(const uint8_t* scales, int t, uint8_t* sc, uint8_t* mn) {
  if (t < 4) {
    *sc = scales[t] & 63;
    *mn = scales[t + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[t + 4] & 0x0F) | (scales[t - 4] >> 6) << 4);
    *mn = static_cast<uint8_t>((scales[t + 4] >> 4) | (scales[t] >> 6) << 4);
  }
}

namespace {

template <typename Block>
Block LoadBlock(const void* src, int64_t b) {
  Block blk;
  std::memcpy(&blk, static_cast<const uint8_t*>(src) + b * sizeof(Block), sizeof(blk));
  return blk;
}

void Dequantize16(const void* src, float* dst, int64_t n, bool bf16) {
  const auto* s = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, s + 2 * i, 2);
    dst[i] = bf16 ? Bf16ToFp32(h) : Fp16ToFp32(h);
  }
}

// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: blocks of 32.
void DequantizeBlocks32(GgmlType type, const void* src, float* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    float* y = dst + b * kQK;
    switch (type) {
      case GgmlType::kQ4_0: {
        const auto blk = LoadBlock<BlockQ4_0>(src, b);
        const float d = Fp16ToFp32(blk.d);
        for (int j = 0; j < kQK / 2; ++j) {
          y[j] = d * (static_cast<int>(blk.qs[j] & 0x0f) - 8);
          y[j + kQK / 2] = d * (static_cast<int>(blk.qs[j] >> 4) - 8);
        }
        break;
      }
      case GgmlType::kQ4_1: {
        const auto blk = LoadBlock<BlockQ4_1>(src, b);
        const float d = Fp16ToFp32(blk.d), m = Fp16ToFp32(blk.m);
        for (int j = 0; j < kQK / 2; ++j) {
          y[j] = d * (blk.qs[j] & 0x0f) + m;
          y[j + kQK / 2] = d * (blk.qs[j] >> 4) + m;
        }
        break;
      }
      case GgmlType::kQ5_0: {
        const auto blk = LoadBlock<BlockQ5_0>(src, b);
        const float d = Fp16ToFp32(blk.d);
        uint32_t qh;
        std::memcpy(&qh, blk.qh, 4);
        for (int i = 0; i < kQK; ++i) y[i] = d * (Q5Quant(blk.qs, qh, i) - 16);
        break;
      }
      case GgmlType::kQ5_1: {
        const auto blk = LoadBlock<BlockQ5_1>(src, b);
        const float d = Fp16ToFp32(blk.d), m = Fp16ToFp32(blk.m);
        uint32_t qh;
        std::memcpy(&qh, blk.qh, 4);
        for (int i = 0; i < kQK; ++i) y[i] = d * Q5Quant(blk.qs, qh, i) + m;
        break;
      }
      default: {  // Q8_0
        const auto blk = LoadBlock<BlockQ8_0>(src, b);
        const float d = Fp16ToFp32(blk.d);
        for (int j = 0; j < kQK; ++j) y[j] = d * blk.qs[j];
        break;
      }
    }
  }
}

// Q4_K, Q5_K, Q6_K: super-blocks of 256.
void DequantizeKQuants(GgmlType type, const void* src, float* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    float* y = dst + b * kQKK;
    if (type == GgmlType::kQ6_K) {
      const auto blk = LoadBlock<BlockQ6_K>(src, b);
      const float d = Fp16ToFp32(blk.d);
      for (int w = 0; w < kQKK; ++w) {
        y[w] = (d * blk.scales[w / 16]) * (Q6KQuant(blk, w) - 32);
      }
      continue;
    }
    // Q4_K and Q5_K share the header and the nibble layout; Q5_K adds qh.
    const bool q5 = type == GgmlType::kQ5_K;
    const auto k4 = q5 ? BlockQ4_K{} : LoadBlock<BlockQ4_K>(src, b);
    const auto k5 = q5 ? LoadBlock<BlockQ5_K>(src, b) : BlockQ5_K{};
    const uint8_t* scales = q5 ? k5.scales : k4.scales;
    const uint8_t* qs = q5 ? k5.qs : k4.qs;
    const float d = Fp16ToFp32(q5 ? k5.d : k4.d);
    const float dmin = Fp16ToFp32(q5 ? k5.dmin : k4.dmin);
    for (int t = 0; t < 8; ++t) {
      uint8_t sc, mn;
      KQuantScaleMin(scales, t, &sc, &mn);
      const float dt = d * sc, mt = dmin * mn;
      for (int l = 0; l < 32; ++l) {
        const uint8_t byte = qs[32 * (t / 2) + l];
        int q = t % 2 == 0 ? byte & 0x0F : byte >> 4;
        if (q5) q |= ((k5.qh[l] >> t) & 1) << 4;
        y[32 * t + l] = dt * q - mt;
      }
    }
  }
}

}  // namespace

absl::Status DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n) {
  const GgmlTypeTraits* t = GetGgmlTypeTraits(static_cast<uint32_t>(type));
  if (t == nullptr || !t->dequantizable) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot dequantize tensor type ", GgmlTypeName(static_cast<uint32_t>(type))));
  }
  if (n < 0 || n % t->block_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("row of ", n, " weights is not a multiple of ", t->block_size));
  }
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      break;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      Dequantize16(src, dst, n, type == GgmlType::kBF16);
      break;
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0:
      DequantizeBlocks32(type, src, dst, n / kQK);
      break;
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      DequantizeKQuants(type, src, dst, n / kQKK);
      break;
    default:
      return absl::InvalidArgumentError("unsupported tensor type");
  }
  return absl::OkStatus();
}

}  // namespace weft

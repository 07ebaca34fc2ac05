#include "common/ggml_types.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace weft {
namespace {

struct TypeEntry {
  uint32_t id;
  GgmlTypeTraits traits;
};

constexpr TypeEntry kTypes[] = {
    {0, {"F32", 1, 4, true}},       {1, {"F16", 1, 2, true}},
    {2, {"Q4_0", 32, 18, true}},    {3, {"Q4_1", 32, 20, true}},
    {6, {"Q5_0", 32, 22, false}},   {7, {"Q5_1", 32, 24, false}},
    {8, {"Q8_0", 32, 34, true}},    {9, {"Q8_1", 32, 36, false}},
    {10, {"Q2_K", 256, 84, false}}, {11, {"Q3_K", 256, 110, false}},
    {12, {"Q4_K", 256, 144, false}}, {13, {"Q5_K", 256, 176, false}},
    {14, {"Q6_K", 256, 210, false}}, {15, {"Q8_K", 256, 292, false}},
    {24, {"I8", 1, 1, false}},      {25, {"I16", 1, 2, false}},
    {26, {"I32", 1, 4, false}},     {27, {"I64", 1, 8, false}},
    {28, {"F64", 1, 8, false}},     {30, {"BF16", 1, 2, true}},
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
    case GgmlType::kF16: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = Fp16ToFp32(h);
      }
      break;
    }
    case GgmlType::kBF16: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = Bf16ToFp32(h);
      }
      break;
    }
    case GgmlType::kQ4_0: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (int64_t b = 0; b < n / kQK; ++b) {
        BlockQ4_0 blk;
        std::memcpy(&blk, s + b * sizeof(BlockQ4_0), sizeof(blk));
        const float d = Fp16ToFp32(blk.d);
        for (int j = 0; j < kQK / 2; ++j) {
          dst[b * kQK + j] = d * (static_cast<int>(blk.qs[j] & 0x0f) - 8);
          dst[b * kQK + j + kQK / 2] = d * (static_cast<int>(blk.qs[j] >> 4) - 8);
        }
      }
      break;
    }
    case GgmlType::kQ4_1: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (int64_t b = 0; b < n / kQK; ++b) {
        BlockQ4_1 blk;
        std::memcpy(&blk, s + b * sizeof(BlockQ4_1), sizeof(blk));
        const float d = Fp16ToFp32(blk.d);
        const float m = Fp16ToFp32(blk.m);
        for (int j = 0; j < kQK / 2; ++j) {
          dst[b * kQK + j] = d * (blk.qs[j] & 0x0f) + m;
          dst[b * kQK + j + kQK / 2] = d * (blk.qs[j] >> 4) + m;
        }
      }
      break;
    }
    case GgmlType::kQ8_0: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (int64_t b = 0; b < n / kQK; ++b) {
        BlockQ8_0 blk;
        std::memcpy(&blk, s + b * sizeof(BlockQ8_0), sizeof(blk));
        const float d = Fp16ToFp32(blk.d);
        for (int j = 0; j < kQK; ++j) dst[b * kQK + j] = d * blk.qs[j];
      }
      break;
    }
    default:
      return absl::InvalidArgumentError("unsupported tensor type");
  }
  return absl::OkStatus();
}

}  // namespace weft

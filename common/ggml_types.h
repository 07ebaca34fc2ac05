// ggml tensor types as stored in GGUF files: ids, block sizes and the reference
// (scalar, exact) dequantization of one row.
//
// Memory layout of the quantized blocks (32 weights each, little-endian):
//   Q4_0: fp16 d, 16 bytes of nibbles.          w[i] = d * (q[i] - 8)
//   Q4_1: fp16 d, fp16 m, 16 bytes of nibbles.  w[i] = d * q[i] + m
//   Q8_0: fp16 d, 32 int8.                      w[i] = d * q[i]
//   nibble layout: byte j (0..15) holds weight j in its low 4 bits and weight j + 16 in
//   its high 4 bits.
// Thread-safety: pure functions.
#ifndef WEFT_COMMON_GGML_TYPES_H_
#define WEFT_COMMON_GGML_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"

namespace weft {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};

struct GgmlTypeTraits {
  const char* name;
  int64_t block_size;   // weights per block
  int64_t type_size;    // bytes per block
  bool dequantizable;   // DequantizeRow supports it
};

// Traits of a type id, or nullptr for an id this build does not know.
const GgmlTypeTraits* GetGgmlTypeTraits(uint32_t type);
std::string GgmlTypeName(uint32_t type);

constexpr int kQK = 32;  // weights per Q4_0 / Q4_1 / Q8_0 block

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block layout");
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block layout");
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block layout");

// IEEE half <-> float, exact (round-to-nearest-even on the way down).
float Fp16ToFp32(uint16_t h);
uint16_t Fp32ToFp16(float f);
// bfloat16 <-> float (round-to-nearest-even on the way down; NaN kept NaN).
inline float Bf16ToFp32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
uint16_t Fp32ToBf16(float f);

// Dequantizes `n` consecutive weights (n a multiple of the type's block size) starting
// at `src` into `dst`. Returns InvalidArgument for an unsupported type or a bad n.
absl::Status DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n);

// Bytes taken by a row of n weights of this type (n a multiple of the block size).
int64_t RowBytes(GgmlType type, int64_t n);

}  // namespace weft

#endif  // WEFT_COMMON_GGML_TYPES_H_

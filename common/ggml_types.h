// ggml tensor types as stored in GGUF files: ids, block sizes and the reference
// (scalar, exact) dequantization of one row.
//
// Memory layout of the quantized blocks (32 weights each, little-endian):
//   Q4_0: fp16 d, 16 bytes of nibbles.          w[i] = d * (q[i] - 8)
//   Q4_1: fp16 d, fp16 m, 16 bytes of nibbles.  w[i] = d * q[i] + m
//   Q5_0: fp16 d, u32 qh, 16 bytes of nibbles.  w[i] = d * (q[i] - 16)
//   Q5_1: fp16 d, fp16 m, u32 qh, 16 nibbles.   w[i] = d * q[i] + m
//   Q8_0: fp16 d, 32 int8.                      w[i] = d * q[i]
//   nibble layout: byte j (0..15) holds weight j in its low 4 bits and weight j + 16 in
//   its high 4 bits; Q5_*: q[i] = nibble | (bit i of qh) << 4.
// K-quants: super-blocks of 256 weights, sub-block t of 32 (t = 0..7) is weights
// 32t..32t+31:
//   Q4_K (144 bytes): fp16 d, fp16 dmin, 12 bytes of 6-bit scales, 128 bytes of nibbles.
//     Sub-block t: weights 32t+l (l = 0..31) are the low (t even) or high (t odd) nibbles
//     of bytes 32*(t/2) + l; w = (d*sc[t]) * q - dmin*mn[t]. sc[t], mn[t] (0..63): for
//     t < 4 sc = s[t] & 63, mn = s[t+4] & 63; else sc = (s[t+4] & 15) | (s[t-4] >> 6) << 4,
//     mn = (s[t+4] >> 4) | (s[t] >> 6) << 4  (s = the 12 scale bytes).
//   Q5_K (176 bytes): fp16 d, fp16 dmin, 12 scale bytes, 32 bytes qh, 128 bytes of
//     nibbles: as Q4_K, plus q += 16 * ((qh[l] >> t) & 1).
//   Q6_K (210 bytes): 128 bytes ql, 64 bytes qh, 16 int8 scales, fp16 d. Weight w of a
//     128-weight half h (w = 0..127; quarter u = w/32, l = w%32): 4 low bits = nibble
//     (u >= 2 ? high : low) of ql[64h + l + 32*(u&1)], 2 high bits = (qh[32h + l] >> 2u)
//     & 3; value = (d * sc[8h + w/16]) * (q - 32) (16-weight sub-blocks).
// Every product above is exact in fp32 (at most 23 significant bits), so a dequantized
// weight is the exact value rounded once (only where a min is added): the order of the
// multiplications cannot change the bits.
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
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct GgmlTypeTraits {
  const char* name;
  int64_t block_size;   // weights per block
  int64_t type_size;    // bytes per block
  bool dequantizable;   // DequantizeRow supports it (and so the matmul kernels)
};

// Traits of a type id, or nullptr for an id this build does not know.
const GgmlTypeTraits* GetGgmlTypeTraits(uint32_t type);
std::string GgmlTypeName(uint32_t type);

constexpr int kQK = 32;   // weights per Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 block
constexpr int kQKK = 256;  // weights per K-quant super-block

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
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block layout");
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block layout");
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block layout");
static_assert(sizeof(BlockQ5_1) == 24, "Q5_1 block layout");
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block layout");
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block layout");
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K block layout");
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block layout");

// The 6-bit scale and min of sub-block t (0..7) of a Q4_K / Q5_K super-block's 12 scale
// bytes (layout above).
void KQuantScaleMin(const uint8_t* scales, int t, uint8_t* sc, uint8_t* mn);

// The 5-bit quant of weight i (0..31) of a Q5_0 / Q5_1 block.
inline int Q5Quant(const uint8_t* qs, uint32_t qh, int i) {
  const int nib = i < 16 ? qs[i] & 0x0F : qs[i - 16] >> 4;
  return nib | static_cast<int>((qh >> i) & 1u) << 4;
}
// Weight w (0..255) of a Q6_K super-block: its 6-bit quant (0..63, value q - 32) and
// the index of its 16-weight scale.
inline int Q6KQuant(const BlockQ6_K& b, int w) {
  const int h = w / 128, u = (w % 128) / 32, l = w % 32;
  const uint8_t lo = b.ql[64 * h + l + 32 * (u & 1)];
  const int nib = u >= 2 ? lo >> 4 : lo & 0x0F;
  return nib | ((b.qh[32 * h + l] >> (2 * u)) & 3) << 4;
}

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

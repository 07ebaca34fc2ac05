// GGUF tensor types as the CUDA weight kernels see them (the ggml type ids of
// common/ggml_types.h, repeated here so that the .cu files need no Abseil headers; a
// static_assert in quant_repack.cc keeps the two in step), and the GEMV layout of a
// quantized matrix.
//
// GEMV layout ("repacked", made once at load time by RepackForGemv, quant_repack.h):
// a Q4_0/Q4_1/Q8_0 matrix of n rows x k weights (k % 32 == 0) as three arrays
//   qs: Q4: n x k/2 bytes, block b of row j at qs + j*k/2 + 16*b (GGUF's nibble order:
//       byte i holds weight i in its low and weight i+16 in its high nibble);
//       Q8: n x k int8, block b of row j at qs + j*k + 32*b;
//   d:  n x k/32 fp16 scales;  m: n x k/32 fp16 minimums (Q4_1 only).
// so every block's weights start 16-byte aligned (one vector load per lane).
// Q5_0, Q5_1, Q4_K, Q5_K, Q6_K ("raw" GEMV types): qs holds the GGUF rows as they are
// (row j at qs + j * GgufRowBytes(type, k), read bytewise; d and m unused): their
// blocks are 22/24/144/176/210 bytes, and the GEMV decodes each 32-weight (sub-)block
// where it reads it (common/ggml_types.h has the block layouts).
// Thread-safety: types only.
#ifndef WEFT_KERNELS_CUDA_QUANT_TYPES_H_
#define WEFT_KERNELS_CUDA_QUANT_TYPES_H_

#include <cstdint>

namespace weft::kernels::cuda {

enum class WeightType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

// The types of the repacked GEMV layout.
constexpr bool IsBlockQuantized(WeightType t) {
  return t == WeightType::kQ4_0 || t == WeightType::kQ4_1 || t == WeightType::kQ8_0;
}
// The types whose GEMV reads the GGUF rows as they are.
constexpr bool IsRawGemvType(WeightType t) {
  return t == WeightType::kQ5_0 || t == WeightType::kQ5_1 || t == WeightType::kQ4_K ||
         t == WeightType::kQ5_K || t == WeightType::kQ6_K;
}
constexpr bool HasGemv(WeightType t) { return IsBlockQuantized(t) || IsRawGemvType(t); }
constexpr bool IsKQuant(WeightType t) {
  return t == WeightType::kQ4_K || t == WeightType::kQ5_K || t == WeightType::kQ6_K;
}
// Weights per block of the type (a row is a whole number of them).
constexpr int64_t BlockWeights(WeightType t) {
  return IsKQuant(t) ? 256 : (t == WeightType::kF32 || t == WeightType::kF16 ||
                              t == WeightType::kBF16) ? 1 : 32;
}

// Bytes of one GGUF row of k weights (k a multiple of BlockWeights(t)).
constexpr int64_t GgufRowBytes(WeightType t, int64_t k) {
  switch (t) {
    case WeightType::kF32:
      return 4 * k;
    case WeightType::kF16:
    case WeightType::kBF16:
      return 2 * k;
    case WeightType::kQ4_0:
      return k / 32 * 18;
    case WeightType::kQ4_1:
      return k / 32 * 20;
    case WeightType::kQ5_0:
      return k / 32 * 22;
    case WeightType::kQ5_1:
      return k / 32 * 24;
    case WeightType::kQ8_0:
      return k / 32 * 34;
    case WeightType::kQ4_K:
      return k / 256 * 144;
    case WeightType::kQ5_K:
      return k / 256 * 176;
    case WeightType::kQ6_K:
      return k / 256 * 210;
  }
  return 0;
}

// A repacked matrix on the device (layout above). Plain data; memory owned elsewhere.
struct GemvWeights {
  WeightType type = WeightType::kQ4_0;
  const uint8_t* qs = nullptr;
  const uint16_t* d = nullptr;
  const uint16_t* m = nullptr;  // Q4_1 only
  // qs, d and m as above; for the raw GEMV types qs holds the GGUF rows.
  int64_t n = 0;
  int64_t k = 0;
};

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_QUANT_TYPES_H_

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
  kQ8_0 = 8,
  kBF16 = 30,
};

inline bool IsBlockQuantized(WeightType t) {
  return t == WeightType::kQ4_0 || t == WeightType::kQ4_1 || t == WeightType::kQ8_0;
}

// Bytes of one GGUF row of k weights (k % 32 == 0 for the block types).
inline int64_t GgufRowBytes(WeightType t, int64_t k) {
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
    case WeightType::kQ8_0:
      return k / 32 * 34;
  }
  return 0;
}

// A repacked matrix on the device (layout above). Plain data; memory owned elsewhere.
struct GemvWeights {
  WeightType type = WeightType::kQ4_0;
  const uint8_t* qs = nullptr;
  const uint16_t* d = nullptr;
  const uint16_t* m = nullptr;  // Q4_1 only
  int64_t n = 0;
  int64_t k = 0;
};

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_QUANT_TYPES_H_

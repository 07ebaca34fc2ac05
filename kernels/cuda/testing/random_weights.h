// Random GGUF matrices for the weight-kernel tests: valid blocks (finite fp16 scales of
// a realistic size, random nibbles / int8) of any supported type.
// Thread-safety: pure function.
#ifndef WEFT_KERNELS_CUDA_TESTING_RANDOM_WEIGHTS_H_
#define WEFT_KERNELS_CUDA_TESTING_RANDOM_WEIGHTS_H_

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/ggml_types.h"

namespace weft::kernels::cuda::testing {

// n rows of k weights of `type`, rows packed (row stride = RowBytes(type, k)).
inline std::vector<uint8_t> RandomGgufMatrix(GgmlType type, int64_t n, int64_t k,
                                             uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> scale(0.002f, 0.05f);
  std::normal_distribution<float> val(0.0f, 0.5f);
  const int64_t row_bytes = RowBytes(type, k);
  std::vector<uint8_t> out(n * row_bytes);
  for (int64_t j = 0; j < n; ++j) {
    uint8_t* row = out.data() + j * row_bytes;
    for (int64_t b = 0; b < k / kQK; ++b) {
      switch (type) {
        case GgmlType::kQ4_0: {
          BlockQ4_0 blk;
          blk.d = Fp32ToFp16(scale(rng));
          for (uint8_t& q : blk.qs) q = static_cast<uint8_t>(rng());
          std::memcpy(row + b * sizeof(blk), &blk, sizeof(blk));
          break;
        }
        case GgmlType::kQ4_1: {
          BlockQ4_1 blk;
          blk.d = Fp32ToFp16(scale(rng));
          blk.m = Fp32ToFp16(-8.0f * scale(rng));
          for (uint8_t& q : blk.qs) q = static_cast<uint8_t>(rng());
          std::memcpy(row + b * sizeof(blk), &blk, sizeof(blk));
          break;
        }
        case GgmlType::kQ8_0: {
          BlockQ8_0 blk;
          blk.d = Fp32ToFp16(scale(rng) / 16);
          for (int8_t& q : blk.qs) q = static_cast<int8_t>(rng());
          std::memcpy(row + b * sizeof(blk), &blk, sizeof(blk));
          break;
        }
        default:
          for (int e = 0; e < kQK; ++e) {
            const float x = val(rng);
            const int64_t c = b * kQK + e;
            if (type == GgmlType::kF32) {
              std::memcpy(row + 4 * c, &x, 4);
            } else {
              const uint16_t h = type == GgmlType::kF16 ? Fp32ToFp16(x) : Fp32ToBf16(x);
              std::memcpy(row + 2 * c, &h, 2);
            }
          }
          break;
      }
    }
  }
  return out;
}

}  // namespace weft::kernels::cuda::testing

#endif  // WEFT_KERNELS_CUDA_TESTING_RANDOM_WEIGHTS_H_

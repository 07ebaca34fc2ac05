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

// Q5_0, Q5_1, Q4_K, Q5_K, Q6_K: random bytes with finite fp16 scales of a realistic
// size (weights of magnitude ~0.01-0.5). False for other types.
inline bool RandomBlocksWithScales(GgmlType type, uint8_t* row, int64_t k, std::mt19937& rng) {
  std::uniform_real_distribution<float> scale(0.002f, 0.05f);
  const auto put16 = [](uint8_t* p, float v) {
    const uint16_t h = Fp32ToFp16(v);
    std::memcpy(p, &h, 2);
  };
  const int64_t block = type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1 ? kQK : kQKK;
  const int64_t block_bytes = RowBytes(type, block);
  switch (type) {
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      break;
    default:
      return false;
  }
  for (int64_t i = 0; i < RowBytes(type, k); ++i) row[i] = static_cast<uint8_t>(rng());
  for (int64_t b = 0; b < k / block; ++b) {
    uint8_t* blk = row + b * block_bytes;
    switch (type) {
      case GgmlType::kQ5_0:
        put16(blk, scale(rng) / 2);
        break;
      case GgmlType::kQ5_1:
        put16(blk, scale(rng) / 2);
        put16(blk + 2, -8.0f * scale(rng));
        break;
      case GgmlType::kQ6_K:
        put16(blk + 208, scale(rng) / 64);
        break;
      default:  // Q4_K, Q5_K: d, dmin
        put16(blk, scale(rng) / 32);
        put16(blk + 2, scale(rng) / 8);
        break;
    }
  }
  return true;
}

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
    if (RandomBlocksWithScales(type, row, k, rng)) continue;
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

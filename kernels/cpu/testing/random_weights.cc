#include "kernels/cpu/testing/random_weights.h"

#include <cstddef>
#include <cstring>

namespace weft::kernels::testing {

namespace {

// K-quant super-blocks: random bytes with finite fp16 scales in their header fields.
std::vector<uint8_t> RandomKQuantRows(GgmlType type, int64_t n, int64_t k, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> u(0.005f, 0.05f);
  const int64_t rb = RowBytes(type, k);
  const int64_t bb = RowBytes(type, kQKK);
  std::vector<uint8_t> raw(n * rb);
  for (auto& c : raw) c = static_cast<uint8_t>(byte(rng));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t b = 0; b < k / kQKK; ++b) {
      uint8_t* blk = raw.data() + j * rb + b * bb;
      const uint16_t d = Fp32ToFp16(u(rng) / 64), dmin = Fp32ToFp16(u(rng) / 8);
      if (type == GgmlType::kQ6_K) {
        std::memcpy(blk + offsetof(BlockQ6_K, d), &d, 2);
      } else {  // Q4_K, Q5_K: d, dmin first
        std::memcpy(blk, &d, 2);
        std::memcpy(blk + 2, &dmin, 2);
      }
    }
  }
  return raw;
}

}  // namespace

std::vector<uint8_t> RandomQuantRows(GgmlType type, int64_t n, int64_t k, std::mt19937& rng) {
  if (GetGgmlTypeTraits(static_cast<uint32_t>(type))->block_size == kQKK) {
    return RandomKQuantRows(type, n, k, rng);
  }
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> u(0.005f, 0.05f);
  const int64_t rb = RowBytes(type, k);
  const int64_t bb = RowBytes(type, 32);
  std::vector<uint8_t> raw(n * rb);
  for (auto& c : raw) c = static_cast<uint8_t>(byte(rng));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t b = 0; b < k / 32; ++b) {
      uint8_t* blk = raw.data() + j * rb + b * bb;
      const uint16_t d = Fp32ToFp16(u(rng)), mm = Fp32ToFp16(-8 * u(rng));
      std::memcpy(blk, &d, 2);
      if (type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1) std::memcpy(blk + 2, &mm, 2);
    }
  }
  return raw;
}

}  // namespace weft::kernels::testing

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11;
// the Random123 reference) and Weft's mapping from (seed, sample, output token) to a
// uniform number, shared by every backend (DESIGN.md "randomness" contract):
//
//   key     = (seed & 0xffffffff, seed >> 32)
//   counter = (sample_index j, output_index i, 0, 0)
//   x       = first output word of Philox4x32-10(counter, key)
//   u       = (x >> 8) * 2^-24, a float in [0, 1) with 24 random bits (exact in fp32)
//
// A CUDA twin computes the same bits (integer arithmetic only).
// Thread-safety: pure functions.
#ifndef WEFT_WORKER_PHILOX_H_
#define WEFT_WORKER_PHILOX_H_

#include <array>
#include <cstdint>

namespace weft {

inline std::array<uint32_t, 4> Philox4x32_10(std::array<uint32_t, 4> ctr,
                                             std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kW0;
      key[1] += kW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
  }
  return ctr;
}

// The uniform number for output token `output_index` of sample `sample_index` of a
// request seeded with `seed` (see above).
inline float SampleUniform(uint64_t seed, uint32_t sample_index, uint32_t output_index) {
  const std::array<uint32_t, 4> x =
      Philox4x32_10({sample_index, output_index, 0u, 0u},
                    {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return static_cast<float>(x[0] >> 8) * (1.0f / 16777216.0f);
}

}  // namespace weft

#endif  // WEFT_WORKER_PHILOX_H_

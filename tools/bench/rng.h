// Portable, seeded pseudo-random numbers for benchmark traces.
//
// std::*_distribution output differs between standard libraries, so traces built on
// them would not replay the same on every machine. This header defines the whole
// pipeline instead: SplitMix64 (seeding) -> xoshiro256** (stream) -> uniform doubles
// (53 bits) -> standard normals (Box-Muller, one value per call) -> exponentials.
// Integer draws are bit-exact everywhere; normals go through glibc's log/cos/sqrt,
// whose results are identical on the x86-64 machines we use (lengths are rounded to
// integers afterwards, so an ulp of difference would almost never show).
// Thread-safety: an Rng is a value; use one per thread.
#ifndef WEFT_TOOLS_BENCH_RNG_H_
#define WEFT_TOOLS_BENCH_RNG_H_

#include <cmath>
#include <cstdint>

namespace weft {
namespace bench {

// One step of SplitMix64: advances *state and returns a well-mixed 64-bit value.
inline uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Mixes several values into one seed (order matters).
inline uint64_t MixSeed(uint64_t a, uint64_t b, uint64_t c = 0) {
  uint64_t s = a;
  uint64_t h = SplitMix64(&s);
  s = h ^ b;
  h = SplitMix64(&s);
  s = h ^ c;
  return SplitMix64(&s);
}

// xoshiro256** 1.0 (Blackman & Vigna), seeded through SplitMix64.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    uint64_t sm = seed;
    for (uint64_t& w : s_) w = SplitMix64(&sm);
  }

  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

  // Uniform integer in [lo, hi] (inclusive), by 64x64->128 multiply (Lemire; the bias
  // is below 2^-32 for ranges under 2^32, which is all we use).
  int64_t UniformInt(int64_t lo, int64_t hi) {
    const uint64_t range = static_cast<uint64_t>(hi - lo) + 1;
    const unsigned __int128 m = static_cast<unsigned __int128>(Next()) * range;
    return lo + static_cast<int64_t>(m >> 64);
  }

  // Standard normal by Box-Muller (the cosine branch only).
  double Normal() {
    const double u1 = 1.0 - Uniform();  // (0, 1]: log is finite
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  // Exponential with the given rate (mean 1/rate).
  double Exponential(double rate) { return -std::log(1.0 - Uniform()) / rate; }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace bench
}  // namespace weft

#endif  // WEFT_TOOLS_BENCH_RNG_H_

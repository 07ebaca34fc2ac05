// The arithmetic of token sampling, in the one header that the host Sampler
// (common/sampling/sampler.cc) and the CUDA sampling kernel (kernels/cuda/sampling.cu)
// both compile — gcc as plain C++, nvcc as host and device functions (WEFT_HD) — so
// that both sides compute the same bits by construction rather than "close" values:
//
//   Philox4x32_10 / Uniform   the one random stream (DESIGN.md "randomness"): Philox4x32-10
//               (Salmon et al., SC'11; the Random123 reference) with
//                 key     = (seed & 0xffffffff, seed >> 32)
//                 counter = (sample_index j, output_index i, 0, 0)
//                 u       = (x0 >> 8) * 2^-24, x0 the first output word: a float in
//                           [0, 1) with 24 random bits (exact in fp32); integers only.
//   Weight(x)   the integer weight of a candidate whose scaled logit is x = l - max l
//               (x <= 0, fp32):  W = min(2^31, floor(2^31 * Exp(x))), 0 for x < -22,
//               where Exp is the fixed double-precision polynomial below (IEEE add and
//               multiply, each rounded to nearest: no FMA, no library exp). A token with
//               W = 0 (probability below 2^-31 of the top token's) is never drawn.
//   sums        of weights are exact uint64 sums (order-independent: the host may add
//               sequentially and the device in any tree); they stay below 2^53 because
//               the vocabulary is at most kMaxVocab, so they convert to double exactly.
//   thresholds  one double multiply each, rounded to nearest:
//                 top-p:  keep through the first token whose running sum S satisfies
//                         double(S) >= double(top_p) * double(Z)
//                 min-p:  drop W with double(W) < double(min_p) * 2^31
//                 draw:   the first token whose running sum S satisfies
//                         double(S) > double(u) * double(Z')
//   RowParams   one row's settings as the device sampler reads them (plain data).
//   token mask  structured output's allowed tokens (worker.proto TokenBitmask):
//               MaskBytes(vocab) bytes, token t allowed iff bit t % 8 of byte t / 8 is
//               set (= bit t % 32 of little-endian uint32 word t / 32); a disallowed
//               token's logit is -inf before every other step.
//
// Host builds of files that include this header must not contract a*b+c into an FMA
// (x86-64 baseline code has no FMA instruction; the sampler targets also pass
// -ffp-contract=off). Device code uses the __dmul_rn/__dadd_rn intrinsics, which nvcc
// never contracts.
// Thread-safety: pure functions and plain data.
#ifndef WEFT_COMMON_SAMPLING_SAMPLING_MATH_H_
#define WEFT_COMMON_SAMPLING_SAMPLING_MATH_H_

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define WEFT_HD __host__ __device__ __forceinline__
#else
#define WEFT_HD inline
#endif

namespace weft::sampling {

// Weight of the most likely candidate (x = 0).
inline constexpr uint32_t kWeightOne = 1u << 31;
// Below this scaled logit the weight is 0: exp(-22) * 2^31 = 0.59 < 1.
inline constexpr float kWeightCutoff = -22.0f;
// Largest vocabulary whose weight sums stay exact in double (2^22 * 2^31 = 2^53).
inline constexpr int32_t kMaxVocab = 1 << 22;

// Bytes of a token mask over `vocab` tokens: whole uint32 words.
WEFT_HD int32_t MaskBytes(int32_t vocab) { return (vocab + 31) / 32 * 4; }
WEFT_HD bool MaskAllows(const uint8_t* mask, int32_t token) {
  return (mask[token >> 3] >> (token & 7)) & 1;
}

WEFT_HD double Mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

WEFT_HD double Add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

// exp(x) for x in [kWeightCutoff, 0], to about 1e-15 relative: x = n ln2 + r with
// n = round(x / ln2) (the 1.5 * 2^52 shift rounds to nearest even), r by Cody-Waite with
// fdlibm's split of ln2 (n * kLn2Hi is exact for |n| < 2^11), exp(r) by its Taylor
// polynomial of degree 11 in Horner form (|r| <= 0.347: truncation < 3e-16), times 2^n
// built from its bits. Every operation is one IEEE double add or multiply.
WEFT_HD double ExpNonPositive(float xf) {
  constexpr double kLog2e = 1.4426950408889634074;
  constexpr double kShift = 6755399441055744.0;  // 1.5 * 2^52
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  const double x = static_cast<double>(xf);
  const double n = Add(Add(Mul(x, kLog2e), kShift), -kShift);
  double r = Add(x, -Mul(n, kLn2Hi));
  r = Add(r, -Mul(n, kLn2Lo));
  // Horner, from 1/11! down to 1 (the doubles nearest to 1/k!).
  double p = 2.505210838544172e-08;
  p = Add(Mul(p, r), 2.755731922398589e-07);
  p = Add(Mul(p, r), 2.7557319223985893e-06);
  p = Add(Mul(p, r), 2.48015873015873e-05);
  p = Add(Mul(p, r), 0.0001984126984126984);
  p = Add(Mul(p, r), 0.001388888888888889);
  p = Add(Mul(p, r), 0.008333333333333333);
  p = Add(Mul(p, r), 0.041666666666666664);
  p = Add(Mul(p, r), 0.16666666666666666);
  p = Add(Mul(p, r), 0.5);
  p = Add(Mul(p, r), 1.0);
  p = Add(Mul(p, r), 1.0);
  // 2^n for n in [-32, 0]: a normal double built from its exponent bits.
  const uint64_t bits = static_cast<uint64_t>(1023 + static_cast<int>(n)) << 52;
  double scale;
#if defined(__CUDA_ARCH__)
  scale = __longlong_as_double(static_cast<long long>(bits));
#else
  std::memcpy(&scale, &bits, sizeof(scale));
#endif
  return Mul(p, scale);
}

// The integer weight of a candidate with scaled logit x = l - max l (see the top).
WEFT_HD uint32_t Weight(float x) {
  if (!(x >= kWeightCutoff)) return 0;  // also x = -inf or NaN
  if (x >= 0.0f) return kWeightOne;
  const double w = Mul(ExpNonPositive(x), 2147483648.0);  // * 2^31 (exact)
  // w is in [0, 2^31 (1 + 1e-15)]: truncate toward zero, clamp to 2^31.
#if defined(__CUDA_ARCH__)
  const uint32_t q = __double2uint_rz(w);
#else
  const uint32_t q = static_cast<uint32_t>(w);
#endif
  return q > kWeightOne ? kWeightOne : q;
}

// top-p: the running sum `cum` (sorted order) has reached top_p of the total `z`.
WEFT_HD double TopPTarget(float top_p, uint64_t z) {
  return Mul(static_cast<double>(top_p), static_cast<double>(z));
}
WEFT_HD bool TopPReached(uint64_t cum, double target) {
  return static_cast<double>(cum) >= target;
}

// min-p: whether a weight survives min_p (relative to the top token's 2^31).
WEFT_HD bool MinPKeeps(uint32_t w, float min_p) {
  return static_cast<double>(w) >= Mul(static_cast<double>(min_p), 2147483648.0);
}

// The draw: the first token whose running sum exceeds u * z.
WEFT_HD double DrawTarget(float u, uint64_t z) {
  return Mul(static_cast<double>(u), static_cast<double>(z));
}
WEFT_HD bool DrawReached(uint64_t cum, double target) {
  return static_cast<double>(cum) > target;
}

// One row of the device sampler (kernels/cuda/sampling.h): a sequence's SamplerParams
// (sampler.h, ToRowParams) plus its history counts.
struct RowParams {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t sample_index = 0;
  uint64_t seed = 0;
  int32_t output_index = 0;  // output tokens so far (Philox counter word 1)
  int32_t num_prompt = 0;    // history entries that are prompt tokens
};

struct Philox4x32 {
  uint32_t w[4];
};

// Philox4x32-10 of counter `c` under key (k0, k1); integer arithmetic only.
WEFT_HD Philox4x32 Philox4x32_10(Philox4x32 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c.w[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c.w[2];
    c = Philox4x32{{static_cast<uint32_t>(p1 >> 32) ^ c.w[1] ^ k0, static_cast<uint32_t>(p1),
                    static_cast<uint32_t>(p0 >> 32) ^ c.w[3] ^ k1, static_cast<uint32_t>(p0)}};
  }
  return c;
}

// The uniform number for output token `output_index` of sample `sample_index` of a
// request seeded with `seed` (see the top).
WEFT_HD float Uniform(uint64_t seed, uint32_t sample_index, uint32_t output_index) {
  const Philox4x32 x = Philox4x32_10(Philox4x32{{sample_index, output_index, 0u, 0u}},
                                     static_cast<uint32_t>(seed),
                                     static_cast<uint32_t>(seed >> 32));
  return static_cast<float>(x.w[0] >> 8) * (1.0f / 16777216.0f);
}

}  // namespace weft::sampling

#endif  // WEFT_COMMON_SAMPLING_SAMPLING_MATH_H_

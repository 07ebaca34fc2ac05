// Device-side decoding of one 32-weight (sub-)block of a GEMV-layout matrix
// (quant_types.h): the repacked Q4_0/Q4_1/Q8_0 arrays or the raw GGUF rows of
// Q5_0/Q5_1/Q4_K/Q5_K/Q6_K, as unscaled quants plus the scales and min that
// DequantizeRow (common/ggml_types.h) applies. Shared by the fused GEMV (quant.cu) and
// the fused GEMM (quant_gemm.cu), so both read one layout the same way.
// Raw rows are read bytewise (no alignment); a repacked block's quants are one 16-byte
// (Q4) or two (Q8) aligned vector loads.
// Included only by .cu files. Thread-safety: device functions without state.
#ifndef WEFT_KERNELS_CUDA_QUANT_BLOCKS_CUH_
#define WEFT_KERNELS_CUDA_QUANT_BLOCKS_CUH_

#include <cstdint>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/quant_types.h"

namespace weft::kernels::cuda {

// Weights per block the GEMV and GEMM decode at a time (a K-quant super-block is 8).
constexpr int kQK = 32;

__device__ __forceinline__ uint16_t LoadU16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

__device__ __forceinline__ uint32_t LoadU32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

// The 5-, 4- or 6-bit quants (unsigned, no offset) of the raw GEMV types' 32-weight
// block b of a GGUF row, and its scales as DequantizeRow (common/ggml_types.h) forms
// them: w[i] = dlo * q[i] + mn for i < 16, dhi * q[i] + mn for i >= 16, where q has
// the type's offset taken out (Q5_0: q - 16, Q6_K: q - 32). Every product is exact in
// fp32 (at most 23 significant bits).
template <WeightType kType>
__device__ __forceinline__ void RawBlock(const uint8_t* row, int64_t b, float* q, float* dlo,
                                         float* dhi, float* mn) {
  if constexpr (kType == WeightType::kQ5_0 || kType == WeightType::kQ5_1) {
    constexpr bool kQ51 = kType == WeightType::kQ5_1;
    const uint8_t* p = row + b * (kQ51 ? 24 : 22);
    const float d = HalfBitsToFloat(LoadU16(p));
    const uint32_t qh = LoadU32(p + (kQ51 ? 4 : 2));
    const uint8_t* qs = p + (kQ51 ? 8 : 6);
#pragma unroll
    for (int i = 0; i < kQK / 2; ++i) {
      const int lo = (qs[i] & 0x0f) | static_cast<int>((qh >> i) & 1u) << 4;
      const int hi = (qs[i] >> 4) | static_cast<int>((qh >> (i + 16)) & 1u) << 4;
      q[i] = static_cast<float>(kQ51 ? lo : lo - 16);
      q[i + 16] = static_cast<float>(kQ51 ? hi : hi - 16);
    }
    *dlo = *dhi = d;
    *mn = kQ51 ? HalfBitsToFloat(LoadU16(p + 2)) : 0.0f;
  } else if constexpr (kType == WeightType::kQ4_K || kType == WeightType::kQ5_K) {
    constexpr bool kQ5 = kType == WeightType::kQ5_K;
    const int t = static_cast<int>(b % 8);
    const uint8_t* p = row + (b / 8) * (kQ5 ? 176 : 144);
    const uint8_t* s = p + 4;  // 12 bytes of 6-bit scales and mins
    int sc, m;
    if (t < 4) {
      sc = s[t] & 63;
      m = s[t + 4] & 63;
    } else {
      sc = (s[t + 4] & 0x0f) | (s[t - 4] >> 6) << 4;
      m = (s[t + 4] >> 4) | (s[t] >> 6) << 4;
    }
    const uint8_t* qh = p + 16;  // Q5_K only
    const uint8_t* qs = p + (kQ5 ? 48 : 16) + 32 * (t / 2);
#pragma unroll
    for (int l = 0; l < kQK; ++l) {
      int v = t % 2 == 0 ? qs[l] & 0x0f : qs[l] >> 4;
      if (kQ5) v |= ((qh[l] >> t) & 1) << 4;
      q[l] = static_cast<float>(v);
    }
    *dlo = *dhi = __fmul_rn(HalfBitsToFloat(LoadU16(p)), static_cast<float>(sc));
    *mn = -__fmul_rn(HalfBitsToFloat(LoadU16(p + 2)), static_cast<float>(m));
  } else {  // Q6_K: block b is weights 32t.. of super-block b / 8 (half h = t / 4)
    static_assert(kType == WeightType::kQ6_K, "raw GEMV type");
    const int t = static_cast<int>(b % 8), h = t / 4, u = t % 4;
    const uint8_t* p = row + (b / 8) * 210;
    const uint8_t* ql = p + 64 * h + 32 * (u & 1);
    const uint8_t* qh = p + 128 + 32 * h;
    const float d = HalfBitsToFloat(LoadU16(p + 208));
#pragma unroll
    for (int l = 0; l < kQK; ++l) {
      const int v = (u >= 2 ? ql[l] >> 4 : ql[l] & 0x0f) | ((qh[l] >> (2 * u)) & 3) << 4;
      q[l] = static_cast<float>(v - 32);
    }
    const int8_t* sc = reinterpret_cast<const int8_t*>(p + 192);
    *dlo = __fmul_rn(d, static_cast<float>(sc[2 * t]));
    *dhi = __fmul_rn(d, static_cast<float>(sc[2 * t + 1]));
    *mn = 0.0f;
  }
}

// The 32 weights of block i (of the whole repacked matrix) as unscaled floats, its
// scale and (Q4_1) minimum.
template <WeightType kType>
__device__ __forceinline__ void GemvBlock(const GemvWeights& w, int64_t i, float* q, float* d,
                                          float* mn) {
  *d = HalfBitsToFloat(w.d[i]);
  if constexpr (kType == WeightType::kQ8_0) {
    const uint4* p = reinterpret_cast<const uint4*>(w.qs + i * kQK);
    __align__(16) uint4 raw[2] = {p[0], p[1]};
    const int8_t* v = reinterpret_cast<const int8_t*>(raw);
#pragma unroll
    for (int e = 0; e < kQK; ++e) q[e] = static_cast<float>(v[e]);
  } else {
    __align__(16) const uint4 raw = *reinterpret_cast<const uint4*>(w.qs + i * (kQK / 2));
    const uint8_t* v = reinterpret_cast<const uint8_t*>(&raw);
    const int offset = kType == WeightType::kQ4_0 ? 8 : 0;
#pragma unroll
    for (int e = 0; e < kQK / 2; ++e) {
      q[e] = static_cast<float>((v[e] & 0x0f) - offset);
      q[e + 16] = static_cast<float>((v[e] >> 4) - offset);
    }
  }
  *mn = kType == WeightType::kQ4_1 ? HalfBitsToFloat(w.m[i]) : 0.0f;
}

// Block b of row `row` for the GEMV: unscaled quants, the scales of its two halves
// (equal but for Q6_K) and its min (repacked layout or raw GGUF rows, quant_types.h).
template <WeightType kType>
__device__ __forceinline__ void LoadGemvBlock(const GemvWeights& w, int64_t row, int64_t b,
                                              float* q, float* dlo, float* dhi, float* mn) {
  if constexpr (IsRawGemvType(kType)) {
    RawBlock<kType>(w.qs + row * GgufRowBytes(kType, w.k), b, q, dlo, dhi, mn);
  } else {
    GemvBlock<kType>(w, row * (w.k / kQK) + b, q, dlo, mn);
    *dhi = *dlo;
  }
}

// Q4_1, Q5_1, Q4_K and Q5_K add a min to every weight (d q + mn); the others do not.
template <WeightType kType>
constexpr bool HasMin() {
  return kType == WeightType::kQ4_1 || kType == WeightType::kQ5_1 ||
         kType == WeightType::kQ4_K || kType == WeightType::kQ5_K;
}

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_QUANT_BLOCKS_CUH_

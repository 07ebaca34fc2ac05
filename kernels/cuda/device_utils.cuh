// Device-side helpers shared by the .cu files of kernels/cuda: element conversions,
// 16-byte vector loads of 8 KV/weight elements, and deterministic warp/block reductions
// (a fixed shuffle tree, so a result never depends on scheduling).
// Included only by .cu files (nvcc). Thread-safety: device functions without state.
#ifndef WEFT_KERNELS_CUDA_DEVICE_UTILS_CUH_
#define WEFT_KERNELS_CUDA_DEVICE_UTILS_CUH_

#if defined(WEFT_CUDA_HOST_EMULATION)
#include "kernels/cuda/testing/host_emulation.h"  // CPU emulation (tests only)
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// A kernel's dynamic shared memory as `T name[]` (16-byte aligned).
#define WEFT_DYNAMIC_SMEM(T, name) extern __shared__ __align__(16) T name[]
#endif

#include <cstdint>

#include "kernels/cuda/dtypes.h"

namespace weft::kernels::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Stores x at element i of an activation buffer of runtime type `dtype` (uniform branch).
__device__ __forceinline__ void StoreAct(void* base, int64_t i, float x, ActDtype dtype) {
  if (dtype == ActDtype::kF32) {
    static_cast<float*>(base)[i] = x;
  } else {
    static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(x);
  }
}

// fp16 bits (as stored in headers that avoid cuda_fp16.h) to float.
__device__ __forceinline__ float HalfBitsToFloat(uint16_t bits) {
  return __half2float(__ushort_as_half(bits));
}
__device__ __forceinline__ uint16_t FloatToHalfBits(float x) {
  return __half_as_ushort(__float2half_rn(x));
}

// Eight consecutive elements -> fp32. `p` must be 16-byte aligned (8 bytes for int8).
__device__ __forceinline__ void Load8(const __half* p, float* out) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void Load8(const __nv_bfloat16* p, float* out) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}
// int8 without its scale (the caller multiplies).
__device__ __forceinline__ void Load8(const int8_t* p, float* out) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const int8_t* q = reinterpret_cast<const int8_t*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = static_cast<float>(q[i]);
}
__device__ __forceinline__ void Load8(const float* p, float* out) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  const float4 b = *reinterpret_cast<const float4*>(p + 4);
  out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
  out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
}

// Sum / max over the 32 lanes of a warp; every lane gets the result.
__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
// Sum over aligned groups of `kWidth` consecutive lanes (kWidth a power of two <= 32).
template <int kWidth>
__device__ __forceinline__ float GroupSum(float v) {
#pragma unroll
  for (int o = kWidth / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// Block-wide sum / max; every thread gets the result. `scratch` holds 32 floats of
// shared memory; blockDim.x is a multiple of 32. Contains __syncthreads().
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int num_warps = blockDim.x >> 5;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < num_warps ? scratch[lane] : 0.0f;
  return WarpSum(v);
}
__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int num_warps = blockDim.x >> 5;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < num_warps ? scratch[lane] : -INFINITY;
  return WarpMax(v);
}

// 1 / sqrt(mean + eps) of a row's sum of squares (RmsNorm's factor).
__device__ __forceinline__ float RmsFactor(float sum, int64_t dim, float eps) {
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(sum, static_cast<float>(dim)), eps)));
}

// RmsNorm's block size (elementwise.cu). A kernel that folds the norm into its prologue
// (quant.cu's normed GEMV) calls RmsNormRowFactor on a block of this size too, so that its
// factor has RmsNorm's bits (the sum order depends on the block size).
inline constexpr int kRmsNormThreads = 256;

// RmsFactor of row x[0 .. dim), the one computation of RmsNormKernel and the normed GEMV:
// every thread takes the columns c = threadIdx.x + i * blockDim.x in order, then BlockSum.
// Every thread gets the result; contains __syncthreads().
__device__ __forceinline__ float RmsNormRowFactor(const float* x, int64_t dim, float eps,
                                                  float* scratch) {
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    ss = __fadd_rn(ss, __fmul_rn(x[c], x[c]));
  }
  return RmsFactor(BlockSum(ss, scratch), dim, eps);
}

// Programmatic dependent launch (launch.h). PdlBegin(), called by every thread before its
// first access to memory an earlier kernel wrote or may still read: waits until the grid
// before this one in the stream has completed and its memory is visible (at once when this
// kernel was not launched with the attribute), then lets the next grid's CTAs start once
// every CTA of this one has passed here or exited — so at most one grid waits ahead.
// sm_90+; a no-op elsewhere and in the host emulation (which runs one grid at a time).
__device__ __forceinline__ void PdlBegin() {
#if !defined(WEFT_CUDA_HOST_EMULATION) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// RoPE's arithmetic, one definition for every kernel that rotates (ApplyRope, the fused
// RoPE + KV write, the QKV GEMV's epilogue), so that they agree bit for bit: the angle
// pos * inv_freq in double, its cos and sin rounded to float; a pair (x0, x1) becomes
// (x0 c - x1 s, x0 s + x1 c), each rounded once per operation.
__device__ __forceinline__ void RopeCosSin(int32_t pos, double inv_freq, float* c, float* s) {
  double sd, cd;
  sincos(static_cast<double>(pos) * inv_freq, &sd, &cd);
  *c = static_cast<float>(cd);
  *s = static_cast<float>(sd);
}
__device__ __forceinline__ float RopeFirst(float x0, float x1, float c, float s) {
  return __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
}
__device__ __forceinline__ float RopeSecond(float x0, float x1, float c, float s) {
  return __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

// Launch helper: blocks needed for n items of `per_block`.
inline unsigned CeilBlocks(int64_t n, int64_t per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_DEVICE_UTILS_CUH_

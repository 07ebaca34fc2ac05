// Warp-level tensor-core primitives (sm_80+): mma.sync m16n8k16 with fp32 accumulation
// on bf16 or fp16 operands, and ldmatrix loads of 8x8 b16 matrices from shared memory.
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"), g = lane / 4,
// t = lane % 4; each 32-bit register holds two consecutive-column elements, the lower
// column in the low half:
//   A (16 x 16, row-major):  a0 = A[g][2t..2t+1]      a1 = A[g+8][2t..2t+1]
//                            a2 = A[g][2t+8..2t+9]    a3 = A[g+8][2t+8..2t+9]
//   B (16 x 8, "col"):       b0 = B[2t..2t+1][g]      b1 = B[2t+8..2t+9][g]
//   C/D (16 x 8, fp32):      c0,c1 = C[g][2t..2t+1]   c2,c3 = C[g+8][2t..2t+1]
// ldmatrix .x4: lanes 8i..8i+7 give the 8 row addresses (16 bytes each) of matrix i;
// register i of lane l receives matrix i's elements (row l/4, columns 2(l%4), +1);
// with .trans, (rows 2(l%4), +1; column l/4) instead.
// Included only by .cu files. Thread-safety: device functions without state (warp-wide:
// every lane of the warp must call them together).
#ifndef WEFT_KERNELS_CUDA_MMA_CUH_
#define WEFT_KERNELS_CUDA_MMA_CUH_

#if defined(WEFT_CUDA_HOST_EMULATION)
#include "kernels/cuda/testing/host_emulation.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

#include <cstdint>

namespace weft::kernels::cuda {

__device__ __forceinline__ void LdMatrixX4(const void* row_addr, uint32_t* r) {
#if defined(WEFT_CUDA_HOST_EMULATION)
  weft::emu::LdMatrix(row_addr, r, false);
#else
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row_addr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
#endif
}

__device__ __forceinline__ void LdMatrixX4Trans(const void* row_addr, uint32_t* r) {
#if defined(WEFT_CUDA_HOST_EMULATION)
  weft::emu::LdMatrix(row_addr, r, true);
#else
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row_addr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
#endif
}

// d = a b + d (d: 4 fp32 of the C layout).
template <typename T>
__device__ __forceinline__ void Mma16816(const uint32_t* a, const uint32_t* b, float* d);

template <>
__device__ __forceinline__ void Mma16816<__nv_bfloat16>(const uint32_t* a, const uint32_t* b,
                                                        float* d) {
#if defined(WEFT_CUDA_HOST_EMULATION)
  weft::emu::Mma<__nv_bfloat16>(a, b, d);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

template <>
__device__ __forceinline__ void Mma16816<__half>(const uint32_t* a, const uint32_t* b,
                                                 float* d) {
#if defined(WEFT_CUDA_HOST_EMULATION)
  weft::emu::Mma<__half>(a, b, d);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// The MMA operand type for a KV element type: bf16 for bf16 KV, fp16 for fp16 and int8
// (dequantized) KV.
template <typename KvT>
struct MmaTypeFor {
  using T = __half;
};
template <>
struct MmaTypeFor<__nv_bfloat16> {
  using T = __nv_bfloat16;
};

// Two floats as one register of T pairs (lo in the low half), round to nearest even.
template <typename T>
__device__ __forceinline__ uint32_t PackPair(float lo, float hi);

template <>
__device__ __forceinline__ uint32_t PackPair<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

template <>
__device__ __forceinline__ uint32_t PackPair<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_MMA_CUH_

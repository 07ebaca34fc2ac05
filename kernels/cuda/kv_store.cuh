// Storing one group of 8 consecutive K or V values (fp32) into the paged KV cache as its
// element type: fp16/bf16 round to nearest even (one 16-byte store); int8 is DESIGN.md's
// group: scale = fp16(max|x| / 127), q = clamp(roundf(x / float(scale)), -127, 127), 0
// for an all-zero group (8 bytes + the 2-byte scale). Shared by WritePagedKv and the
// fused RoPE + KV write, so both store the same bits.
// Included only by .cu files. Thread-safety: device functions without state.
#ifndef WEFT_KERNELS_CUDA_KV_STORE_CUH_
#define WEFT_KERNELS_CUDA_KV_STORE_CUH_

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/paged_kv.h"

namespace weft::kernels::cuda {

// Where group g (dims 8 g .. 8 g + 7, kKvInt8Group = 8) of KV head h of the token at
// slot_id (>= 0: block slot_id / block_size, row slot_id % block_size) lives in the pool:
// its first element (in elements of kv.dtype from kv.k / kv.v) and its int8 scale (from
// kv.k_scale / kv.v_scale).
struct KvGroupAt {
  int64_t data;
  int64_t scale;
};
__device__ __forceinline__ KvGroupAt KvGroupIndex(const PagedKvView& kv, int64_t slot_id, int h,
                                                  int g) {
  const int64_t block = slot_id / kv.block_size;
  const int64_t row = int64_t{h} * kv.block_size + slot_id % kv.block_size;  // in the block
  const int groups_per_head = kv.head_dim / kKvInt8Group;
  return {block * kv.block_stride + row * kv.head_dim + g * kKvInt8Group,
          block * kv.scale_block_stride + row * groups_per_head + g};
}

__device__ __forceinline__ void StoreGroup(__half* dst, uint16_t*, const float* x) {
  __align__(16) __half h[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) h[i] = __float2half_rn(x[i]);
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(h);
}

__device__ __forceinline__ void StoreGroup(__nv_bfloat16* dst, uint16_t*, const float* x) {
  __align__(16) __nv_bfloat16 h[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) h[i] = __float2bfloat16_rn(x[i]);
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(h);
}

// DESIGN.md's int8 group: scale = fp16(max|x| / 127), q = round(x / scale).
__device__ __forceinline__ void StoreGroup(int8_t* dst, uint16_t* scale_dst, const float* x) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(x[i]));
  const uint16_t scale_bits = FloatToHalfBits(amax / 127.0f);
  const float scale = HalfBitsToFloat(scale_bits);
  __align__(8) int8_t q[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float r = scale == 0.0f ? 0.0f : roundf(x[i] / scale);
    q[i] = static_cast<int8_t>(fminf(fmaxf(r, -127.0f), 127.0f));
  }
  *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(q);
  *scale_dst = scale_bits;
}

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_KV_STORE_CUH_

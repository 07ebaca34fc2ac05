// Device helpers shared by the decode and prefill attention kernels: reading eight
// consecutive K/V elements of one row of the paged pool as fp32 (int8 groups scaled by
// their fp16 scale), the kernels' dispatch over (KV dtype, head_dim), and the first key
// of a sliding window.
// Included only by .cu files. Thread-safety: device functions without state.
#ifndef WEFT_KERNELS_CUDA_ATTENTION_COMMON_CUH_
#define WEFT_KERNELS_CUDA_ATTENTION_COMMON_CUH_

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/paged_attention.h"

namespace weft::kernels::cuda {

// Elements [d0, d0 + 8) of K (or V) row `row` (= kv_head * block_size + slot) of block
// `block`; d0 % 8 == 0.
template <typename KvT, int kHeadDim>
__device__ __forceinline__ void LoadKvRow8(const void* base, const uint16_t* scales,
                                           const PagedKvView& kv, int64_t block, int64_t row,
                                           int d0, float* out) {
  const int64_t elem = block * kv.block_stride + row * kHeadDim + d0;
  Load8(static_cast<const KvT*>(base) + elem, out);
  if constexpr (sizeof(KvT) == 1) {
    const float s = HalfBitsToFloat(
        scales[block * kv.scale_block_stride + row * (kHeadDim / kKvInt8Group) + d0 / 8]);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = out[i] * s;
  }
}

// The first key position a query at position `pos` sees: 0, or with a sliding window
// max(0, pos - window + 1).
__device__ __forceinline__ int WindowStart(int pos, int window) {
  return window > 0 ? max(0, pos - window + 1) : 0;
}

// The kPipelined decode kernel (decode_attention_pipelined.cu): InvalidValue for K/V,
// int8 scale or q rows that are not 16-byte aligned. PagedDecodeAttention has validated
// the rest of the arguments.
cudaError_t LaunchPipelinedDecode(const DecodeAttentionArgs& args, const PagedKvView& kv,
                                  cudaStream_t stream);
// The kGrouped decode kernel (decode_attention_grouped.cu), likewise.
cudaError_t LaunchGroupedDecode(const DecodeAttentionArgs& args, const PagedKvView& kv,
                                cudaStream_t stream);
// Set the shared memory limits of every pipelined / grouped decode and tensor-core
// prefill instance
// (PrepareAttentionKernels, in decode_attention.cu: the first archive of the library,
// so that any program linking it resolves these).
cudaError_t PreparePipelinedDecode();
cudaError_t PrepareGroupedDecode();
cudaError_t PrepareTcPrefill();

// Raises `kernel`'s dynamic shared memory limit to `bytes`, unless `stream` is being
// captured into a CUDA graph (the call is not a stream operation and must not run during
// a capture; PrepareAttentionKernels() sets every limit beforehand).
template <typename Kernel>
cudaError_t SetSmemLimitOutsideCapture(Kernel kernel, int bytes, cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const cudaError_t e = cudaStreamIsCapturing(stream, &capture);
  if (e != cudaSuccess) return e;
  if (capture != cudaStreamCaptureStatusNone) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

// Calls f.template operator()<KvT, kHeadDim>() for the view's dtype and head_dim;
// returns cudaErrorInvalidValue for an unsupported pair.
template <typename F>
cudaError_t DispatchKv(KvDtype dtype, int32_t head_dim, F&& f) {
  switch (dtype) {
    case KvDtype::kF16:
      if (head_dim == 64) return f.template operator()<__half, 64>();
      if (head_dim == 128) return f.template operator()<__half, 128>();
      if (head_dim == 256) return f.template operator()<__half, 256>();
      break;
    case KvDtype::kBf16:
      if (head_dim == 64) return f.template operator()<__nv_bfloat16, 64>();
      if (head_dim == 128) return f.template operator()<__nv_bfloat16, 128>();
      if (head_dim == 256) return f.template operator()<__nv_bfloat16, 256>();
      break;
    case KvDtype::kInt8:
      if (head_dim == 64) return f.template operator()<int8_t, 64>();
      if (head_dim == 128) return f.template operator()<int8_t, 128>();
      if (head_dim == 256) return f.template operator()<int8_t, 256>();
      break;
    case KvDtype::kF32:  // CPU only
      break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_ATTENTION_COMMON_CUH_

// cp.async (sm_80+) helpers: 16-byte global -> shared copies that bypass registers and
// L1 (.cg), grouped and waited for as a multi-stage pipeline:
//
//   for each stage s < kStages - 1: issue tile s's copies; CpAsyncCommit();
//   for tile t: CpAsyncWait<kStages - 2>(); __syncthreads();  // tile t has landed
//               issue tile t + kStages - 1 into the stage tile t - 1 used; CpAsyncCommit();
//               compute on tile t
//
// Commit a group every iteration, even an empty one, so that the wait counts stay right.
// Included only by .cu files. Thread-safety: device functions without state.
#ifndef WEFT_KERNELS_CUDA_ASYNC_COPY_CUH_
#define WEFT_KERNELS_CUDA_ASYNC_COPY_CUH_

#if defined(WEFT_CUDA_HOST_EMULATION)
#include "kernels/cuda/testing/host_emulation.h"
#else
#include <cuda_runtime.h>
#endif

#include <cstdint>

namespace weft::kernels::cuda {

// Copies 16 bytes from `src` (16-byte aligned, global) to `dst` (16-byte aligned,
// shared); with valid == false writes 16 zero bytes and reads nothing (src must still
// be a valid address expression, e.g. the tensor's base).
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid) {
#if defined(WEFT_CUDA_HOST_EMULATION)
  weft::emu::CpAsync(dst, src, valid);
#else
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src),
               "r"(src_bytes)
               : "memory");
#endif
}

__device__ __forceinline__ void CpAsyncCommit() {
#if defined(WEFT_CUDA_HOST_EMULATION)
  weft::emu::CpAsyncCommit();
#else
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
#if defined(WEFT_CUDA_HOST_EMULATION)
  weft::emu::CpAsyncWait(kPending);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_ASYNC_COPY_CUH_

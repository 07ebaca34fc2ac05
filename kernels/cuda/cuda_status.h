// CUDA runtime return codes as absl::Status (STYLE.md: a CUDA/NCCL/cuBLAS failure is an
// absl::InternalError naming the call and its file:line).
//
//   WEFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(...));
//   absl::Status s = CudaCall(cudaStreamSynchronize(stream), "sync", __FILE__, __LINE__);
//
// Kernels in kernels/cuda return cudaError_t (plain-pointer entry points); the code
// above them (worker/backends/cuda) turns the codes into Status with these helpers.
// Thread-safety: pure functions.
#ifndef WEFT_KERNELS_CUDA_CUDA_STATUS_H_
#define WEFT_KERNELS_CUDA_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"

namespace weft::kernels::cuda {

// OkStatus for cudaSuccess, else InternalError("file:line: expr: cudaErrorName: text").
absl::Status CudaCall(cudaError_t error, const char* expr, const char* file, int line);

// Number of CUDA devices, 0 when there is no device or no usable driver (never an error:
// tests use it to skip).
int CudaDeviceCount();

// Why CudaDeviceCount() is 0: "" when a device is present, else the runtime's answer
// (e.g. cudaErrorInsufficientDriver when the driver is older than the CUDA runtime we
// link, cudaErrorNoDevice without a GPU), for skip messages and Create's error.
std::string CudaNoDeviceReason();

}  // namespace weft::kernels::cuda

#define WEFT_CUDA_RETURN_IF_ERROR(expr)                                                  \
  do {                                                                                   \
    const ::absl::Status weft_cuda_status_ =                                             \
        ::weft::kernels::cuda::CudaCall((expr), #expr, __FILE__, __LINE__);              \
    if (!weft_cuda_status_.ok()) return weft_cuda_status_;                               \
  } while (0)

#endif  // WEFT_KERNELS_CUDA_CUDA_STATUS_H_

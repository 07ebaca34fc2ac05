#include "kernels/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace weft::kernels::cuda {

absl::Status CudaCall(cudaError_t error, const char* expr, const char* file, int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", expr, ": ",
                                          cudaGetErrorName(error), ": ",
                                          cudaGetErrorString(error)));
}

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  return n;
}

}  // namespace weft::kernels::cuda

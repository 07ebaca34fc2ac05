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

std::string CudaNoDeviceReason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess && n > 0) return std::string();
  if (e != cudaSuccess) (void)cudaGetLastError();
  return e == cudaSuccess ? std::string("cudaGetDeviceCount: 0 devices")
                          : absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorName(e), ": ",
                                         cudaGetErrorString(e));
}

}  // namespace weft::kernels::cuda

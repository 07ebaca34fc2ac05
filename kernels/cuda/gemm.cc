#include "kernels/cuda/gemm.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace weft::kernels::cuda {

cublasStatus_t Gemm(cublasHandle_t handle, WeightDtype in_dtype, const void* x, int64_t ldx,
                    const void* w, int64_t ldw, int64_t m, int64_t n, int64_t k, void* y,
                    ActDtype y_dtype, int64_t ldy, float beta) {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  if (m < 0 || n < 0 || k < 0 || m > kMax || n > kMax || k > kMax || ldx > kMax ||
      ldw > kMax || ldy > kMax) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const cudaDataType_t in = in_dtype == WeightDtype::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
  const cudaDataType_t out = y_dtype == ActDtype::kF32 ? CUDA_R_32F : CUDA_R_16BF;
  const float alpha = 1.0f;
  return cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n),
                      static_cast<int>(m), static_cast<int>(k), &alpha, w, in,
                      static_cast<int>(ldw), x, in, static_cast<int>(ldx), &beta, y, out,
                      static_cast<int>(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

absl::Status CublasCall(cublasStatus_t status, const char* expr, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", expr, ": ",
                                          cublasGetStatusName(status), ": ",
                                          cublasGetStatusString(status)));
}

}  // namespace weft::kernels::cuda

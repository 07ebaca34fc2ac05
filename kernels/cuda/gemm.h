// The dense GEMM of the CUDA backend through cuBLAS (tensor cores, fp32 accumulation),
// in the row-major terms of the rest of the code:
//
//   Y[i][j] = sum_c X[i][c] * W[j][c]  (+ beta * Y[i][j])     i < m, j < n, c < k
//
// X: m rows of k bf16/fp16 (row stride ldx), W: n rows of k of the same type (ldw), Y: m
// rows of n fp32 or bf16 (ldy). beta = 1 fuses a residual add into the epilogue. In
// cuBLAS's column-major terms: Y^T = op_T(W^T) * X^T, i.e. cublasGemmEx(T, N, n, m, k).
// cuBLAS picks its algorithm per shape: results are deterministic for a fixed shape and
// GPU, not bitwise the same across batch sizes (the CUDA backend documents this).
// Thread-safety: a cublasHandle_t belongs to one thread (the rank's step thread).
#ifndef WEFT_KERNELS_CUDA_GEMM_H_
#define WEFT_KERNELS_CUDA_GEMM_H_

#include <cublas_v2.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/dtypes.h"

namespace weft::kernels::cuda {

cublasStatus_t Gemm(cublasHandle_t handle, WeightDtype in_dtype, const void* x, int64_t ldx,
                    const void* w, int64_t ldw, int64_t m, int64_t n, int64_t k, void* y,
                    ActDtype y_dtype, int64_t ldy, float beta);

// OkStatus for CUBLAS_STATUS_SUCCESS, else InternalError("file:line: expr: name: text").
absl::Status CublasCall(cublasStatus_t status, const char* expr, const char* file, int line);

}  // namespace weft::kernels::cuda

#define WEFT_CUBLAS_RETURN_IF_ERROR(expr)                                                \
  do {                                                                                   \
    const ::absl::Status weft_cublas_status_ =                                           \
        ::weft::kernels::cuda::CublasCall((expr), #expr, __FILE__, __LINE__);            \
    if (!weft_cublas_status_.ok()) return weft_cublas_status_;                           \
  } while (0)

#endif  // WEFT_KERNELS_CUDA_GEMM_H_

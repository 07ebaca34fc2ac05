// The CPU twin of QuantGemm (kernels/cuda/quant_gemm.h) for its emulated and GPU tests:
// every weight exactly dequantized (DequantizeRow, common/ggml_types.h) and rounded to
// bf16 as DequantizeWeights rounds it, times the bf16 rows of x, summed in double — and,
// per output, the sum of the products' magnitudes, which bounds fp32 summation error:
// recursive fp32 summation of N terms is within (N - 1) 2^-24 sum |terms| of the exact
// sum, in any order (the products of two bf16 are exact in fp32).
// Thread-safety: pure functions.
#ifndef WEFT_KERNELS_CUDA_TESTING_QUANT_GEMM_REFERENCE_H_
#define WEFT_KERNELS_CUDA_TESTING_QUANT_GEMM_REFERENCE_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/ggml_types.h"

namespace weft::kernels::cuda::testing {

struct QuantGemmExpected {
  std::vector<double> want;  // m x n: (y0 +) sum_c x[i][c] w[j][c]
  std::vector<double> mag;   // m x n: (|y0| +) sum_c |x[i][c] w[j][c]|
};

// x: m rows of k bf16 bits (ldx apart); y0: the initial y (m rows, ldy apart), added
// when accumulate. `bytes`: n packed GGUF rows of `type`.
inline QuantGemmExpected QuantGemmReference(GgmlType type, const uint8_t* bytes, int64_t n,
                                            int64_t k, const uint16_t* x, int64_t ldx,
                                            int32_t m, const float* y0, int64_t ldy,
                                            bool accumulate) {
  std::vector<float> w(n * k);
  for (int64_t j = 0; j < n; ++j) {
    if (!DequantizeRow(type, bytes + j * RowBytes(type, k), &w[j * k], k).ok()) return {};
  }
  for (float& v : w) v = Bf16ToFp32(Fp32ToBf16(v));
  QuantGemmExpected e;
  e.want.resize(m * n);
  e.mag.resize(m * n);
  for (int32_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = accumulate ? y0[i * ldy + j] : 0.0, a = std::fabs(s);
      for (int64_t c = 0; c < k; ++c) {
        const double p = double{Bf16ToFp32(x[i * ldx + c])} * w[j * k + c];
        s += p;
        a += std::fabs(p);
      }
      e.want[i * n + j] = s;
      e.mag[i * n + j] = a;
    }
  }
  return e;
}

// The first output of `got` (m rows, ldy apart) off by more than ulps * 2^-24 * mag from
// the twin, or a column past n that differs from y0: a message, "" when none.
inline std::string QuantGemmMismatch(const QuantGemmExpected& e, const std::vector<float>& got,
                                     const std::vector<float>& y0, int32_t m, int64_t n,
                                     int64_t ldy, double ulps) {
  if (e.want.size() != static_cast<size_t>(m * n)) return "no reference";
  for (int32_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < ldy; ++j) {
      const double g = got[i * ldy + j];
      if (j >= n) {
        if (got[i * ldy + j] != y0[i * ldy + j]) {
          return "column " + std::to_string(j) + " past n written in row " + std::to_string(i);
        }
        continue;
      }
      const double want = e.want[i * n + j];
      const double tol = ulps * std::ldexp(1.0, -24) * e.mag[i * n + j];
      if (!(std::fabs(g - want) <= tol)) {
        return "y[" + std::to_string(i) + "][" + std::to_string(j) + "] = " + std::to_string(g) +
               ", want " + std::to_string(want) + " +- " + std::to_string(tol);
      }
    }
  }
  return "";
}

}  // namespace weft::kernels::cuda::testing

#endif  // WEFT_KERNELS_CUDA_TESTING_QUANT_GEMM_REFERENCE_H_

// RMSNorm over rows of fp32 activations.
//
//   out[t][c] = (x[t][c] * r) * weight[c],   r = 1 / sqrt(mean_c(x[t][c]^2) + eps)
//
// Layout: row t of x at x + t*x_stride (dim floats), of out at out + t*out_stride; out
// may alias x. The sum of squares uses 16 interleaved partial sums (partial l takes
// c = l, l+16, ...) added in order 0..15: a fixed order per row, so rows are
// independent of each other (batch invariant).
// Thread-safety: a pure function.
#ifndef WEFT_KERNELS_CPU_RMS_NORM_H_
#define WEFT_KERNELS_CPU_RMS_NORM_H_

#include <cstdint>

namespace weft::kernels {

void RmsNorm(const float* x, int64_t x_stride, const float* weight, int64_t num_tokens,
             int64_t dim, float eps, float* out, int64_t out_stride);

}  // namespace weft::kernels

#endif  // WEFT_KERNELS_CPU_RMS_NORM_H_

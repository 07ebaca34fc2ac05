#include "kernels/cpu/rms_norm.h"

#include <cmath>

namespace weft::kernels {

void RmsNorm(const float* x, int64_t x_stride, const float* weight, int64_t num_tokens,
             int64_t dim, float eps, float* out, int64_t out_stride) {
  constexpr int kLanes = 16;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* xr = x + t * x_stride;
    float* yr = out + t * out_stride;
    float part[kLanes] = {};
    int64_t c = 0;
    for (; c + kLanes <= dim; c += kLanes) {
      for (int l = 0; l < kLanes; ++l) part[l] = part[l] + xr[c + l] * xr[c + l];
    }
    for (int l = 0; c + l < dim; ++l) part[l] = part[l] + xr[c + l] * xr[c + l];
    float sum = 0.0f;
    for (int l = 0; l < kLanes; ++l) sum = sum + part[l];
    const float r = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] * r) * weight[i];
  }
}

}  // namespace weft::kernels

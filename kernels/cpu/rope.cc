#include "kernels/cpu/rope.h"

#include <cmath>
#include <vector>

namespace weft::kernels {

void RopeCosSin(const int32_t* positions, int64_t num_tokens, int32_t rot_dim,
                const double* inv_freq, float* cos_sin) {
  const int32_t half = rot_dim / 2;
  for (int64_t t = 0; t < num_tokens; ++t) {
    float* row = cos_sin + t * rot_dim;
    for (int32_t i = 0; i < half; ++i) {
      const double theta = static_cast<double>(positions[t]) * inv_freq[i];
      row[i] = static_cast<float>(std::cos(theta));
      row[half + i] = static_cast<float>(std::sin(theta));
    }
  }
}

void RopeCosSin(const int32_t* positions, int64_t num_tokens, int32_t rot_dim,
                float freq_base, float* cos_sin) {
  std::vector<double> inv_freq(rot_dim / 2);
  RopeInvFreq(freq_base, rot_dim, 1.0f, nullptr, inv_freq.data());
  RopeCosSin(positions, num_tokens, rot_dim, inv_freq.data(), cos_sin);
}

void ApplyRope(RopeStyle style, const float* cos_sin, int32_t rot_dim, float* x,
               int64_t x_stride, int64_t num_tokens, int32_t num_heads, int32_t head_dim) {
  const int32_t half = rot_dim / 2;
  // Index distance between the two members of a pair, and between consecutive pairs.
  const int32_t mate = style == RopeStyle::kNormal ? 1 : half;
  const int32_t step = style == RopeStyle::kNormal ? 2 : 1;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* cs = cos_sin + t * rot_dim;
    for (int32_t h = 0; h < num_heads; ++h) {
      float* head = x + t * x_stride + h * head_dim;
      for (int32_t i = 0; i < half; ++i) {
        float* a = head + i * step;
        const float x0 = a[0];
        const float x1 = a[mate];
        a[0] = x0 * cs[i] - x1 * cs[half + i];
        a[mate] = x0 * cs[half + i] + x1 * cs[i];
      }
    }
  }
}

}  // namespace weft::kernels

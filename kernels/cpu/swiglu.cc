#include "kernels/cpu/swiglu.h"

#include <cmath>

namespace weft::kernels {

void SwiGlu(const float* gate, const float* up, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace weft::kernels

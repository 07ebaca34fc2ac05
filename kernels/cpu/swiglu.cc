#include "kernels/cpu/swiglu.h"

#include <cmath>

#include "kernels/cpu/cpu_features.h"

namespace weft::kernels {

namespace avx512 {
void SwiGlu(const float* gate, const float* up, int64_t count, float* out);
}  // namespace avx512

bool ElementwiseSupported(ElementwiseImpl impl) {
  return impl == ElementwiseImpl::kReference || CpuFeatures::Get().HasAvx512();
}

void SwiGlu(ElementwiseImpl impl, const float* gate, const float* up, int64_t count, float* out) {
  if (impl == ElementwiseImpl::kAvx512) return avx512::SwiGlu(gate, up, count, out);
  SwiGlu(gate, up, count, out);
}

void SwiGlu(const float* gate, const float* up, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void GeluTanhGlu(const float* gate, const float* up, int64_t count, float* out) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoef = 0.044715f;
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * g * (1.0f + kCoef * g * g))) * up[i];
  }
}

}  // namespace weft::kernels

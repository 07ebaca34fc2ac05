// SwiGLU activation: out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)).
// Layout: `count` floats in each of gate, up and out (out may alias either input).
// Elementwise, so batch invariant (each implementation on its own). Thread-safety: a pure
// function.
#ifndef WEFT_KERNELS_CPU_SWIGLU_H_
#define WEFT_KERNELS_CPU_SWIGLU_H_

#include <cstdint>

namespace weft::kernels {

enum class ElementwiseImpl {
  kReference,  // libm expf
  kAvx512,     // polynomial exp (relative error ~2e-7); needs AVX-512
};

// True if `impl` runs on this CPU.
bool ElementwiseSupported(ElementwiseImpl impl);

void SwiGlu(ElementwiseImpl impl, const float* gate, const float* up, int64_t count, float* out);

// The reference implementation.
void SwiGlu(const float* gate, const float* up, int64_t count, float* out);

}  // namespace weft::kernels

#endif  // WEFT_KERNELS_CPU_SWIGLU_H_

// SwiGLU activation: out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)).
// Layout: `count` floats in each of gate, up and out (out may alias either input).
// Elementwise, so batch invariant. Thread-safety: a pure function.
#ifndef WEFT_KERNELS_CPU_SWIGLU_H_
#define WEFT_KERNELS_CPU_SWIGLU_H_

#include <cstdint>

namespace weft::kernels {

void SwiGlu(const float* gate, const float* up, int64_t count, float* out);

}  // namespace weft::kernels

#endif  // WEFT_KERNELS_CPU_SWIGLU_H_

// Gated FFN activations. SwiGLU: out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)).
// GeGLU (Gemma): out[i] = gelu(gate[i]) * up[i] with the tanh form of GELU,
//   gelu(g) = 0.5 g (1 + tanh(sqrt(2/pi) g (1 + 0.044715 g^2))),
// in fp32 with libm tanhf (llama.cpp's ggml_gelu_f32 expression; its CPU path instead
// rounds g to fp16 and reads a table, within ~1e-3 relative of this).
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

// GeGLU (portable on every CPU: one implementation, so batch invariant everywhere).
void GeluTanhGlu(const float* gate, const float* up, int64_t count, float* out);

}  // namespace weft::kernels

#endif  // WEFT_KERNELS_CPU_SWIGLU_H_

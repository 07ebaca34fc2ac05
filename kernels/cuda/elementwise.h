// Token-wise CUDA kernels of the Llama forward pass: fused residual-add + RMSNorm, RoPE,
// SwiGLU and the embedding gather. CPU twins: kernels/cpu/rms_norm.h, rope.h, swiglu.h,
// and LlamaWeights::Embed.
//
// Layout: activations are token-major rows; row t of a buffer at base + t*stride
// (elements of its type). Residual stream and GEMM outputs are fp32; what feeds the next
// GEMM is written as ActDtype (bf16 in the backend, fp32 for exact tests).
// Arithmetic matches the CPU twins where cheap: products that the CPU rounds separately
// are rounded separately here (__fmul_rn / __fadd_rn, no FMA contraction), RoPE angles are
// computed in double from the same inverse frequencies; sums of squares use a fixed
// warp-shuffle tree instead of the CPU's 16 lanes (differences are fp32 rounding).
// Every kernel is batch invariant: row t's result depends only on row t.
// Thread-safety: launches on the caller's stream.
#ifndef WEFT_KERNELS_CUDA_ELEMENTWISE_H_
#define WEFT_KERNELS_CUDA_ELEMENTWISE_H_

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu/rope.h"
#include "kernels/cuda/dtypes.h"

namespace weft::kernels::cuda {

// out[i][c] = (x'[r][c] * inv) * weight[c],  inv = 1 / sqrt(mean_c(x'[r][c]^2) + eps),
// r = rows ? rows[i] : i, and x' = x + delta, stored back into x when delta is set
// (the residual add of the previous projection, fused). delta requires rows == nullptr.
struct RmsNormArgs {
  float* x = nullptr;
  int64_t x_stride = 0;
  const float* delta = nullptr;  // optional
  int64_t delta_stride = 0;
  const int32_t* rows = nullptr;  // optional (device), e.g. the tokens that want logits
  const float* weight = nullptr;  // [dim]
  int64_t num_rows = 0;
  int64_t dim = 0;
  float eps = 1e-5f;
  void* out = nullptr;
  ActDtype out_dtype = ActDtype::kBf16;
  int64_t out_stride = 0;
};
cudaError_t RmsNorm(const RmsNormArgs& args, cudaStream_t stream);

// inv_freq[i] = freq_base^(-2i / rot_dim) in double, the expression of RopeCosSin (host).
inline void RopeInvFreq(float freq_base, int32_t rot_dim, double* inv_freq) {
  for (int32_t i = 0; i < rot_dim / 2; ++i) {
    inv_freq[i] =
        std::pow(static_cast<double>(freq_base), -2.0 * i / static_cast<double>(rot_dim));
  }
}

// One tensor RoPE rotates in place: rows of num_heads heads of head_dim fp32 values.
struct RopeTarget {
  float* x = nullptr;
  int64_t stride = 0;
  int32_t num_heads = 0;  // 0: no tensor
};

// Rotates the first rot_dim dims of every head of a and b (queries and keys) at token
// positions[t] (kernels/cpu/rope.h's angles and pairs: theta = pos * inv_freq[i] in
// double, cos/sin rounded to fp32). inv_freq: rot_dim/2 doubles on the device.
cudaError_t ApplyRope(RopeStyle style, const int32_t* positions, const double* inv_freq,
                      int32_t rot_dim, int32_t head_dim, int64_t num_tokens,
                      const RopeTarget& a, const RopeTarget& b, cudaStream_t stream);

// out[t][i] = silu(gate[t][i]) * up[t][i], silu(g) = g / (1 + expf(-g)), i < width.
// gate and up rows are in_stride floats apart (the fused gate|up GEMM output).
cudaError_t SwiGlu(const float* gate, const float* up, int64_t in_stride, int64_t num_tokens,
                   int64_t width, void* out, ActDtype out_dtype, int64_t out_stride,
                   cudaStream_t stream);

// out[t][c] = table[ids[t]][c] as fp32 (table: vocab rows of dim weights of `dtype`).
// An id outside [0, vocab) gives a zero row (the backend validates ids first).
cudaError_t EmbeddingGather(const void* table, WeightDtype dtype, int64_t vocab, int64_t dim,
                            const int32_t* ids, int64_t num_tokens, float* out,
                            int64_t out_stride, cudaStream_t stream);

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_ELEMENTWISE_H_

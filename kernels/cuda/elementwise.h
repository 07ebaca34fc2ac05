// Token-wise CUDA kernels of the forward pass (every architecture of
// common/model_config.h): fused residual-add (+ post-norm) + RMSNorm, the per-head QK
// RMSNorm, bias rows, RoPE, SwiGLU and GeGLU, the (scaled) embedding gather and logit
// soft-capping. CPU twins: kernels/cpu/rms_norm.h, rope.h, swiglu.h, LlamaWeights::Embed
// and LlamaModel's bias add, embedding scale and soft-capping.
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
// With delta_weight (a post-norm, Gemma 3): x' = x + (delta[i][c] * inv_d) * delta_weight[c],
// inv_d the RMS factor of delta's row with the same eps.
struct RmsNormArgs {
  float* x = nullptr;
  int64_t x_stride = 0;
  const float* delta = nullptr;  // optional
  int64_t delta_stride = 0;
  const float* delta_weight = nullptr;  // optional: RMSNorm delta with it before the add
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

// QK norm: every head of every token (head h of token t at x + t*stride + h*head_dim) is
// RMS-normalized in place with weight[head_dim] (RmsNorm's arithmetic on a head_dim row).
cudaError_t HeadRmsNorm(float* x, int64_t stride, int64_t num_tokens, int32_t num_heads,
                        int32_t head_dim, const float* weight, float eps, cudaStream_t stream);

// x[t][j] += bias[j] for t < num_rows, j < width (fp32; the Q/K/V biases).
cudaError_t AddRowBias(float* x, int64_t stride, int64_t num_rows, const float* bias,
                       int64_t width, cudaStream_t stream);

// x[i] = cap * tanhf(x[i] / cap) for rows of width floats (final logit soft-capping).
cudaError_t SoftCap(float* x, int64_t stride, int64_t num_rows, int64_t width, float cap,
                    cudaStream_t stream);

// inv_freq[i] = freq_base^(-2i / rot_dim) in double: kernels/cpu/rope.h's RopeInvFreq
// without scaling (the backend passes every layer's RopeSpec to that one).
inline void RopeInvFreq(float freq_base, int32_t rot_dim, double* inv_freq) {
  ::weft::kernels::RopeInvFreq(freq_base, rot_dim, 1.0f, nullptr, inv_freq);
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
// The same with GELU (tanh form): out = 0.5 g (1 + tanhf(sqrt(2/pi) g (1 + 0.044715 g^2))) up,
// the expression of kernels/cpu/swiglu.h's GeluTanhGlu.
cudaError_t GeGlu(const float* gate, const float* up, int64_t in_stride, int64_t num_tokens,
                  int64_t width, void* out, ActDtype out_dtype, int64_t out_stride,
                  cudaStream_t stream);

// out[t][c] = table[ids[t]][c] as fp32 (table: vocab rows of dim weights of `dtype`),
// times `scale` when it is not 1 (Gemma 3's sqrt(hidden)). An id outside [0, vocab)
// gives a zero row (the backend validates ids first).
cudaError_t EmbeddingGather(const void* table, WeightDtype dtype, int64_t vocab, int64_t dim,
                            const int32_t* ids, int64_t num_tokens, float* out,
                            int64_t out_stride, cudaStream_t stream, float scale = 1.0f);

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_ELEMENTWISE_H_

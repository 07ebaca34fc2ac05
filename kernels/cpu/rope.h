// Rotary position embedding (RoPE) on rows of query/key heads.
//
// Angles: theta(p, i) = p * inv_freq[i] for pair i < rot_dim/2, computed in double and
// stored as fp32 in a table, row t = [cos(theta(pos[t], i)) for i] followed by
// [sin(theta(pos[t], i)) for i] (rot_dim floats per token). inv_freq[i] =
// freq_base^(-2i / rot_dim) in double, times the linear scaling factor freq_scale, divided
// by factors[i] when the model has them (Llama 3's rope_freqs.weight): llama.cpp's angle
// (which it accumulates in float) in exact arithmetic.
// Pairs rotated, (a, b) -> (a*cos - b*sin, a*sin + b*cos):
//   kNormal: (x[2i], x[2i+1])          llama.cpp's LLAMA_ROPE_TYPE_NORM, used for
//                                      arch "llama" (the GGUF converter permutes Q/K
//                                      rows so this equals HF's rotate_half)
//   kNeox:   (x[i], x[i + rot_dim/2])  HF rotate_half on unpermuted weights
// Dimensions >= rot_dim of each head are left alone.
// Layout: row t of x at x + t*x_stride holds num_heads heads of head_dim floats.
// Thread-safety: pure functions.
#ifndef WEFT_KERNELS_CPU_ROPE_H_
#define WEFT_KERNELS_CPU_ROPE_H_

#include <cmath>
#include <cstdint>

namespace weft::kernels {

enum class RopeStyle {
  kNormal,
  kNeox,
};

// inv_freq: rot_dim / 2 doubles (above). factors: rot_dim / 2 floats or null. Inline so
// the CUDA backend computes its tables with the same expression.
inline void RopeInvFreq(float freq_base, int32_t rot_dim, float freq_scale, const float* factors,
                        double* inv_freq) {
  for (int32_t i = 0; i < rot_dim / 2; ++i) {
    double f = std::pow(static_cast<double>(freq_base), -2.0 * i / static_cast<double>(rot_dim));
    if (freq_scale != 1.0f) f = f * static_cast<double>(freq_scale);
    if (factors != nullptr) f = f / static_cast<double>(factors[i]);
    inv_freq[i] = f;
  }
}

// cos_sin: [num_tokens][rot_dim] as described above. rot_dim is even.
void RopeCosSin(const int32_t* positions, int64_t num_tokens, int32_t rot_dim,
                const double* inv_freq, float* cos_sin);
// The same with inv_freq = RopeInvFreq(freq_base, rot_dim, 1, null).
void RopeCosSin(const int32_t* positions, int64_t num_tokens, int32_t rot_dim,
                float freq_base, float* cos_sin);

void ApplyRope(RopeStyle style, const float* cos_sin, int32_t rot_dim, float* x,
               int64_t x_stride, int64_t num_tokens, int32_t num_heads, int32_t head_dim);

}  // namespace weft::kernels

#endif  // WEFT_KERNELS_CPU_ROPE_H_

// Matmul of fp32 activations with a (possibly quantized) GGUF weight matrix.
//
//   Y[i][j] = sum_{c < k} X[i][c] * W[j][c]     for i < m, j in [n_begin, n_end)
//
// Memory layout:
//   X: m rows of k fp32, row i at x + i * ldx.
//   W: a QuantMatrix (common/quant_matrix.h): n rows of k weights in GGUF's encoding.
//   Y: m rows, row i at y + i * ldy; only columns [n_begin, n_end) are written.
// Threads split the columns: calls on disjoint [n_begin, n_end) ranges may run
// concurrently. Never split K: every output is one fixed summation order.
//
// Implementations (chosen per weight, never per call, so a weight always computes the
// same way):
//   kReference: fp32 with exactly dequantized weights; each output is the sequential
//     sum acc = acc + w*x over c = 0..k-1 (no FMA), independent of m and of the column
//     split. Every type DequantizeRow supports (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
//     Q8_0, Q4_K, Q5_K, Q6_K); k a whole number of the type's blocks.
//   kAvx512: AVX-512F FMA, dequantizing 32-weight blocks on the fly (the dequantized
//     weights are exact, as in the reference). Each output accumulates two 16-lane
//     partial sums (low and high half of each block) in block order and reduces them in
//     a fixed order, whatever m, the tile shape or the column split: batch invariant,
//     and within fp32 rounding of the reference. Needs k % 32 == 0 and one of F32, F16,
//     BF16, Q4_0, Q4_1, Q8_0.
// Thread-safety: pure functions of their arguments.
#ifndef WEFT_KERNELS_CPU_QUANT_MATMUL_H_
#define WEFT_KERNELS_CPU_QUANT_MATMUL_H_

#include <cstdint>

#include "common/ggml_types.h"
#include "common/quant_matrix.h"

namespace weft::kernels {

enum class MatmulImpl {
  kReference,
  kAvx512,
};

const char* MatmulImplName(MatmulImpl impl);

using QuantMatrix = ::weft::QuantMatrix;

// True if `impl` can run `type` with row length k on this CPU.
bool MatmulSupported(MatmulImpl impl, GgmlType type, int64_t k);

// The fastest implementation that supports (type, k) here; kReference as the fallback.
MatmulImpl BestMatmulImpl(GgmlType type, int64_t k);

// Computes columns [n_begin, n_end) of Y (see above). Precondition:
// MatmulSupported(impl, w.type, w.k) and 0 <= n_begin <= n_end <= w.n.
void Matmul(MatmulImpl impl, const QuantMatrix& w, const float* x, int64_t ldx, int64_t m,
            float* y, int64_t ldy, int64_t n_begin, int64_t n_end);

// The reference implementation (what Matmul(kReference, ...) runs).
void MatmulReference(const QuantMatrix& w, const float* x, int64_t ldx, int64_t m, float* y,
                     int64_t ldy, int64_t n_begin, int64_t n_end);

}  // namespace weft::kernels

#endif  // WEFT_KERNELS_CPU_QUANT_MATMUL_H_

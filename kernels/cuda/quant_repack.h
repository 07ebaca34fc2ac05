// RepackForGemv: the load-time conversion of a GGUF matrix into the GEMV layout of
// quant_types.h (Q4_0/Q4_1/Q8_0 repacked; Q5_0/Q5_1/Q4_K/Q5_K/Q6_K rows copied as they
// are; plain C++, no CUDA: the backend uploads the arrays), and GemvReference, the CPU
// twin of the fused dequantizing GEMV over that layout.
// Thread-safety: pure functions.
#ifndef WEFT_KERNELS_CUDA_QUANT_REPACK_H_
#define WEFT_KERNELS_CUDA_QUANT_REPACK_H_

#include <cstdint>
#include <vector>

#include "kernels/cuda/quant_types.h"

namespace weft::kernels::cuda {

struct RepackedMatrix {
  WeightType type = WeightType::kQ4_0;
  int64_t n = 0;
  int64_t k = 0;
  std::vector<uint8_t> qs;   // raw GEMV types: the GGUF rows, packed
  std::vector<uint16_t> d;   // repacked types only
  std::vector<uint16_t> m;   // Q4_1 only
};

// Repacks n rows of k weights, row j's GGUF blocks at src + j*row_stride bytes.
// Returns false for a type without a GEMV (HasGemv) or k not a whole number of blocks.
bool RepackForGemv(WeightType type, const uint8_t* src, int64_t row_stride, int64_t n,
                   int64_t k, RepackedMatrix* out);

// y[i][j] = sum_c x[i][c] * w[j][c] for i < m, over the repacked weights (fp32, weights
// exactly dequantized, sequential sums): what QuantGemv computes, up to summation order.
void GemvReference(const RepackedMatrix& w, const float* x, int64_t ldx, int64_t m, float* y,
                   int64_t ldy);

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_QUANT_REPACK_H_

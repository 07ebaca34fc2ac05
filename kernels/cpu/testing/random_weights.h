// Random GGUF weight rows for the matmul kernels' tests.
#ifndef WEFT_KERNELS_CPU_TESTING_RANDOM_WEIGHTS_H_
#define WEFT_KERNELS_CPU_TESTING_RANDOM_WEIGHTS_H_

#include <cstdint>
#include <random>
#include <vector>

#include "common/ggml_types.h"

namespace weft::kernels::testing {

// n rows of k weights of `type` (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; Q4_K, Q5_K, Q6_K with k a
// multiple of 256): random quant bytes, every block's scale in [0.005, 0.05) and (Q4_1,
// Q5_1) its min -8 times such a value; K-quant super-block scales in [0.005, 0.05) / 64
// (d) and / 8 (dmin), their 6- and 8-bit sub-block scales random. Draws from `rng` in a
// fixed order, so a caller that goes on drawing sees the same sequence every run.
std::vector<uint8_t> RandomQuantRows(GgmlType type, int64_t n, int64_t k, std::mt19937& rng);

}  // namespace weft::kernels::testing

#endif  // WEFT_KERNELS_CPU_TESTING_RANDOM_WEIGHTS_H_

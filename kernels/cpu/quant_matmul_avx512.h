// Entry point of quant_matmul_avx512.cc, the only translation unit of the matmul built
// with AVX-512 flags. It includes nothing but <immintrin.h> and <cstdint>, and defines
// everything else with internal linkage, so no inline or template code shared with the
// portable path is ever compiled for AVX-512 (the linker could otherwise pick that copy
// for a machine without it). Call only after checking the CPU (quant_matmul.cc does).
// Thread-safety: a pure function.
#ifndef WEFT_KERNELS_CPU_QUANT_MATMUL_AVX512_H_
#define WEFT_KERNELS_CPU_QUANT_MATMUL_AVX512_H_

#include <cstdint>

namespace weft::kernels::avx512 {

// Weight encodings this path understands (values are private to the two files).
enum WeightFormat : int32_t {
  kFormatF32 = 0,
  kFormatF16 = 1,
  kFormatBf16 = 2,
  kFormatQ4_0 = 3,
  kFormatQ4_1 = 4,
  kFormatQ8_0 = 5,
};

// Same contract and layout as weft::kernels::Matmul (quant_matmul.h); k % 32 == 0.
void Matmul(WeightFormat format, const uint8_t* w, int64_t row_stride, int64_t k,
            const float* x, int64_t ldx, int64_t m, float* y, int64_t ldy, int64_t n_begin,
            int64_t n_end);

}  // namespace weft::kernels::avx512

#endif  // WEFT_KERNELS_CPU_QUANT_MATMUL_AVX512_H_

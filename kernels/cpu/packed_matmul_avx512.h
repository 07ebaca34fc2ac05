// Entry point of packed_matmul_avx512.cc, the AVX-512 translation unit of the packed
// matmul (packed_matmul.h). Like quant_matmul_avx512.h it includes nothing shared so no
// inline code is compiled with AVX-512 flags. Call only after a CPU check.
// Thread-safety: a pure function.
#ifndef WEFT_KERNELS_CPU_PACKED_MATMUL_AVX512_H_
#define WEFT_KERNELS_CPU_PACKED_MATMUL_AVX512_H_

#include <cstdint>

namespace weft::kernels::avx512 {

enum PackedFormat : int32_t {
  kPackedQ4 = 0,   // Q4_0 and Q4_1 records (d, m, nibbles)
  kPackedQ8 = 1,   // Q8_0 records (d, int8)
};

// Same contract and layout as weft::kernels::PackedMatmul; k % 32 == 0, k <= 16384.
void PackedMatmul(PackedFormat format, const uint8_t* w, int64_t n, int64_t k, const float* x,
                  int64_t ldx, int64_t m, float* y, int64_t ldy, int64_t n_begin,
                  int64_t n_end);

}  // namespace weft::kernels::avx512

#endif  // WEFT_KERNELS_CPU_PACKED_MATMUL_AVX512_H_

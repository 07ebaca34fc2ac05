// The AMX translation unit of bf16_matmul.h (internal to kernels/): built with AMX,
// AVX-512 BF16 and VBMI flags and reached only after CpuFeatures::HasAmxBf16(). It
// defines no inline code (//kernels:isa_objects_test); contracts as in bf16_matmul.h.
#ifndef WEFT_KERNELS_CPU_BF16_MATMUL_AMX_H_
#define WEFT_KERNELS_CPU_BF16_MATMUL_AMX_H_

#include <cstdint>

#include "kernels/cpu/bf16_matmul.h"

namespace weft::kernels::amx_bf16 {

// Scratch the caller provides (64-byte aligned): the dequantized B tiles of two panels
// (2 * (k / 32) KB).
int64_t ScratchBytes(int64_t k);

void ConvertRowsBf16(const float* x, int64_t ldx, int64_t row_begin, int64_t row_end,
                     Bf16Rows* out);
void Bf16Matmul(const Bf16PackedMatrix& w, const Bf16Rows& x, int64_t m, float* y, int64_t ldy,
                int64_t n_begin, int64_t n_end, uint8_t* scratch);
int64_t PeakLoop(int64_t iters);

}  // namespace weft::kernels::amx_bf16

#endif  // WEFT_KERNELS_CPU_BF16_MATMUL_AMX_H_

// ISA-specific halves of kernels/cpu/int8_matmul.h (internal to kernels/). Each function
// is compiled in its own translation unit with that ISA's flags and reached only after a
// CpuFeatures check. Contracts as in int8_matmul.h.
#ifndef WEFT_KERNELS_CPU_INT8_MATMUL_ISA_H_
#define WEFT_KERNELS_CPU_INT8_MATMUL_ISA_H_

#include <cstdint>

#include "kernels/cpu/int8_matmul.h"

namespace weft::kernels {

// K formats (int8_kformats.cc, baseline code): packing, and the sums of q_x over each 16
// values of rows 0..m-1 (out[i * (x.k / 16) + h]; Q6_K's S0 / S1).
void PackInt8KFormat(const QuantMatrix& src, uint8_t* dst);
void HalfBlockSums(const Q8Rows& x, int64_t m, int32_t* out);

namespace scalar {
void Int8Matmul(const Int8PackedMatrix& w, const Q8Rows& x, int64_t m, float* y, int64_t ldy,
                int64_t n_begin, int64_t n_end);
void Int8MatmulK(const Int8PackedMatrix& w, const Q8Rows& x, int64_t m, float* y, int64_t ldy,
                 int64_t n_begin, int64_t n_end);
void QuantizeRowsQ8(const float* x, int64_t ldx, int64_t row_begin, int64_t row_end, Q8Rows* out);
}  // namespace scalar

namespace avx512vnni {
void Int8Matmul(const Int8PackedMatrix& w, const Q8Rows& x, int64_t m, float* y, int64_t ldy,
                int64_t n_begin, int64_t n_end);
void QuantizeRowsQ8(const float* x, int64_t ldx, int64_t row_begin, int64_t row_end, Q8Rows* out);
int64_t PeakLoop(int64_t iters);
}  // namespace avx512vnni

namespace amx {
// Rows [0, m - m % 16) only (whole 16-row tiles); requires CpuFeatures::HasAmxInt8().
// scratch: 64-byte aligned, kAmxScratchBytesPerBlock * (w.k / 32) bytes (Q4 weights'
// unpacked B tiles).
inline constexpr int64_t kAmxScratchBytesPerBlock = 512;
void Int8Matmul(const Int8PackedMatrix& w, const Q8Rows& x, int64_t m, float* y, int64_t ldy,
                int64_t n_begin, int64_t n_end, uint8_t* scratch);
int64_t PeakLoop(int64_t iters);
}  // namespace amx

namespace avx2 {
void Int8Matmul(const Int8PackedMatrix& w, const Q8Rows& x, int64_t m, float* y, int64_t ldy,
                int64_t n_begin, int64_t n_end);
// The K formats; s16: HalfBlockSums of x's rows 0..m-1 (read for Q6_K only).
void Int8MatmulK(const Int8PackedMatrix& w, const Q8Rows& x, const int32_t* s16, int64_t m,
                 float* y, int64_t ldy, int64_t n_begin, int64_t n_end);
}  // namespace avx2

}  // namespace weft::kernels

#endif  // WEFT_KERNELS_CPU_INT8_MATMUL_ISA_H_

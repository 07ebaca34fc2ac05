// Int8 matmul: Q4_0 / Q4_1 / Q8_0 weights times activations quantized to int8 on the
// fly, with integer dot products (AVX-512 VNNI `vpdpbusd`, or AVX2 `vpmaddubsw` +
// `vpmaddwd`, or AMX int8 tiles), as llama.cpp computes its quantized matmuls.
//
//   Y[i][j] = sum over 32-weight blocks b of  dw[j][b] * dx[i][b] * (q_w . q_x)  (+ Q4 min term)
//
// Activations (Q8Rows): each row of k floats is cut into k/32 blocks; block b gets
// amax = max |x|, d = amax / 127, q = round_to_nearest_even(x * (127 / amax)) clamped
// to [-127, 127] (all zero when amax == 0), qsum = sum of its q, ds = d * float(qsum).
// Blocks of 32 along K keep tensor-parallel shards (which split K on multiples of 32)
// quantizing exactly as TP = 1.
//
// Weights are repacked at load into 16-row panels (lanes = output rows). Panel p
// (rows 16p..16p+15, rows past n are zero) starts at data + p * Int8PanelBytes(type, k);
// inside it, block b is one record at b * Int8RecordBytes(type):
//   Q4_0 / Q4_1 (320 bytes): fp16 dw[16], fp16 mw[16], then 4 vectors of 64 bytes;
//     bytes 4r..4r+3 of vector j are bytes 4j..4j+3 of row r's GGUF block, i.e. the low
//     nibbles are weights 4j..4j+3 and the high nibbles weights 16+4j..16+4j+3 (one
//     `vpdpbusd` dword each). w = dw*q + mw; Q4_0 is stored with mw = -8*dw (exact).
//   Q8_0 (544 bytes): fp16 dw[16], then 8 vectors of 64 bytes; bytes 4r..4r+3 of vector
//     g are the signed weights 4g..4g+3 of row r. w = dw*q.
//
// The arithmetic of each output (i, j) is fixed — the same whatever the ISA path, the
// tile shape, the number of rows m or the column split (batch invariance; the paths
// agree bitwise, which the tests check):
//   acc = 0.0f
//   for b = 0 .. k/32-1:
//     isum = sum_c q_w[c] * q_x[c]                         (exact int32)
//     acc  = fmaf(float(isum), dw[j][b] * dx[i][b], acc)
//     acc  = fmaf(mw[j][b], ds[i][b], acc)                  (Q4_0 / Q4_1 only)
//   Y[i][j] = acc
// Thread-safety: pure functions; packed weights are immutable after PackInt8Weights.
#ifndef WEFT_KERNELS_CPU_INT8_MATMUL_H_
#define WEFT_KERNELS_CPU_INT8_MATMUL_H_

#include <cstdint>

#include "common/ggml_types.h"
#include "kernels/cpu/quant_matmul.h"

namespace weft::kernels {

// Implementations of the same arithmetic.
enum class Int8Isa {
  kScalar,      // portable C++ (the reference the SIMD paths are tested against)
  kAvx2,        // AVX2 + FMA + F16C
  kAvx512Vnni,  // AVX-512 F/BW/VL + VNNI
  kAmx,         // AMX int8 tiles for each 16 rows of x, the VNNI kernel for the rest
};

const char* Int8IsaName(Int8Isa isa);
bool Int8IsaSupported(Int8Isa isa);

// Activation rows quantized as described above. The buffers belong to the caller.
struct Q8Rows {
  int64_t k = 0;          // row length (multiple of 32)
  int8_t* q = nullptr;    // row i at q + i * k
  float* d = nullptr;     // [row][k/32]
  float* ds = nullptr;    // [row][k/32]
  int32_t* qsum = nullptr;  // [row][k/32]

  int64_t blocks() const { return k / 32; }
};

// Quantizes rows [row_begin, row_end) of x (rows ldx floats apart, k = out->k floats
// each) into the same rows of *out. Same bits on every CPU.
void QuantizeRowsQ8(const float* x, int64_t ldx, int64_t row_begin, int64_t row_end, Q8Rows* out);

inline constexpr int64_t kInt8PanelRows = 16;
// Bytes of one packed record (one block of 32 weights for each of a panel's 16 rows).
inline constexpr int64_t kInt8Q4RecordBytes = 320;
inline constexpr int64_t kInt8Q8RecordBytes = 544;

// True if `type` with rows of k weights has an int8 kernel (Q4_0, Q4_1, Q8_0; k % 32 == 0).
bool Int8MatmulSupported(GgmlType type, int64_t k);
int64_t Int8RecordBytes(GgmlType type);
int64_t Int8PanelBytes(GgmlType type, int64_t k);
int64_t Int8PackedBytes(GgmlType type, int64_t n, int64_t k);

// Rearranges `src` (a row-major GGUF matrix, quant_matmul.h) into `dst`
// (Int8PackedBytes(src.type, src.n, src.k) bytes).
void PackInt8Weights(const QuantMatrix& src, uint8_t* dst);

struct Int8PackedMatrix {
  GgmlType type = GgmlType::kQ4_1;
  const uint8_t* data = nullptr;
  int64_t n = 0;
  int64_t k = 0;
};

// Columns [n_begin, n_end) of Y for rows 0..m-1 of x (x.k == w.k). Calls on disjoint
// column ranges may run concurrently. Precondition: Int8IsaSupported(isa),
// Int8MatmulSupported(w.type, w.k).
void Int8Matmul(Int8Isa isa, const Int8PackedMatrix& w, const Q8Rows& x, int64_t m, float* y,
                int64_t ldy, int64_t n_begin, int64_t n_end);

// Benchmark ceiling: runs `iters` rounds of independent integer dot-product instructions
// of `isa` (kAvx512Vnni: 12 `vpdpbusd` chains; kAmx: 4 TDPBSUD tiles of 16 x 16 x 32,
// one 32-weight block each, the shape the AMX kernel uses) and returns the multiply-adds
// done. 0 for an ISA without such a loop or not supported here.
int64_t Int8PeakLoop(Int8Isa isa, int64_t iters);

}  // namespace weft::kernels

#endif  // WEFT_KERNELS_CPU_INT8_MATMUL_H_

// Int8 matmul: quantized GGUF weights (Q4_0, Q4_1, Q8_0; and Q5_0, Q5_1, Q4_K, Q5_K,
// Q6_K, the "K formats" below) times activations quantized to int8 on the fly, with
// integer dot products (AVX-512 VNNI `vpdpbusd`, or AVX2 `vpmaddubsw` + `vpmaddwd`, or
// AMX int8 tiles), as llama.cpp computes its quantized matmuls.
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
//
// K formats (Q5_0, Q5_1, Q4_K, Q5_K, Q6_K). Why these records: each keeps about the
// file's bits per weight (a decode step reads every weight once, so bytes are time) while
// staying in the shape the int8 dot products want. Q4_K's 32-weight sub-blocks are
// Q4_1-shaped (w = (d*sc)*q - dmin*mn), but d*sc and dmin*mn have up to 17 significant
// bits: in fp16 (a Q4 record) they would round, and in fp32 per block they would cost 2
// more bits per weight; so the records keep the file's fp16 super-block scales and 6-bit
// sub-block scales and the kernels form the exact fp32 products. 5- and 6-bit quants are
// nibbles plus planes of high bits that AVX2 merges with a shift, a mask and an or.
// No AVX-512 / AMX code reads them: on those CPUs Int8IsaFor() sends them to the AVX2
// kernel (same bits).
//   A panel is a run of groups, one per 32-weight block (Q5_0, Q5_1) or per 256-weight
//   super-block (K-quants, 8 blocks), group g at g * Int8GroupBytes(type):
//     header: fp16 d[16] (Q6_K: the super-block's d; Q5_*: the block's d), then for
//             Q5_1 fp16 m[16], for Q4_K / Q5_K fp16 dmin[16];
//     then per block t of the group, Int8KBlockBytes(type) bytes:
//       scales (K-quants, 32 bytes): Q4_K / Q5_K u8 sc[16], u8 mn[16] (6-bit values);
//               Q6_K int8 sc0[16], sc1[16] (the scales of weights 0..15 and 16..31);
//       nibbles (256 bytes): 4 vectors of 64 bytes as in a Q4 record: bytes 4r..4r+3 of
//               vector j hold the low 4 bits of weights 4j..4j+3 (low nibbles) and
//               16+4j..16+4j+3 (high nibbles) of row r;
//       high bits (5-bit: 64 bytes, 6-bit: 128 bytes): 5-bit: byte 4r+c, bit 2j = bit 4
//               of weight 4j+c, bit 2j+1 = bit 4 of weight 16+4j+c; 6-bit: vector v
//               (0, 1) byte 4r+c, for j = 2v+u (u = 0, 1): bits 4u..4u+1 = bits 4..5 of
//               weight 4j+c, bits 4u+2..4u+3 = bits 4..5 of weight 16+4j+c.
//   q is the unsigned quant (Q5: 0..31, Q4_K: 0..15, Q5_K: 0..31, Q6_K: 0..63). Per
//   output, block b (t-th of its group), with D, M the group's fp16 d, dmin as fp32:
//     Q5_0: isum = sum q*q_x - 16*qsum[i][b];  acc = fmaf(float(isum), d*dx, acc)
//     Q5_1: isum = sum q*q_x;  acc = fmaf(float(isum), d*dx, acc);  acc = fmaf(m, ds, acc)
//     Q4_K, Q5_K: isum = sum q*q_x;  acc = fmaf(float(isum), (D*float(sc)) * dx, acc);
//                 acc = fmaf(-(M*float(mn)), ds, acc)        (D*sc and M*mn are exact)
//     Q6_K: isum = sc0 * (sum_{c<16} q*q_x - 32*S0) + sc1 * (sum_{c>=16} q*q_x - 32*S1)
//           (S0, S1: the sums of q_x over the two halves; exact int32, |isum| < 2^24 so
//           float(isum) is exact);  acc = fmaf(float(isum), D*dx, acc)
//   The integer sums may be formed in any order (they are exact), so the paths agree.
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

// True if `type` with rows of k weights has an int8 kernel (Q4_0, Q4_1, Q8_0, Q5_0, Q5_1
// with k % 32 == 0; Q4_K, Q5_K, Q6_K with k % 256 == 0).
bool Int8MatmulSupported(GgmlType type, int64_t k);
// Q5_0, Q5_1, Q4_K, Q5_K, Q6_K (the K formats above).
bool IsInt8KFormat(GgmlType type);
// Q4_0 / Q4_1 / Q8_0: bytes of one record (one 32-weight block of a panel).
int64_t Int8RecordBytes(GgmlType type);
// K formats: bytes of one group of a panel, and of one block inside it.
int64_t Int8GroupBytes(GgmlType type);
int64_t Int8KBlockBytes(GgmlType type);
int64_t Int8PanelBytes(GgmlType type, int64_t k);
int64_t Int8PackedBytes(GgmlType type, int64_t n, int64_t k);

// The ISA that runs `type` when `isa` is asked for: `isa` itself, except that the K
// formats have no AVX-512 VNNI / AMX kernels and run on AVX2 there (the same bits).
Int8Isa Int8IsaFor(Int8Isa isa, GgmlType type);

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
// Int8MatmulSupported(w.type, w.k). Runs on Int8IsaFor(isa, w.type).
void Int8Matmul(Int8Isa isa, const Int8PackedMatrix& w, const Q8Rows& x, int64_t m, float* y,
                int64_t ldy, int64_t n_begin, int64_t n_end);

// Benchmark ceiling: runs `iters` rounds of independent integer dot-product instructions
// of `isa` (kAvx512Vnni: 12 `vpdpbusd` chains; kAmx: 4 TDPBSUD tiles of 16 x 16 x 32,
// one 32-weight block each, the shape the AMX kernel uses) and returns the multiply-adds
// done. 0 for an ISA without such a loop or not supported here.
int64_t Int8PeakLoop(Int8Isa isa, int64_t iters);

}  // namespace weft::kernels

#endif  // WEFT_KERNELS_CPU_INT8_MATMUL_H_

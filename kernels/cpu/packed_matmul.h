// Packed matmul: Q4_0 / Q4_1 / Q8_0 weights repacked at load time into 16-row panels so
// that one AVX-512 register holds 16 output features, then multiplied by fp32
// activations (Y[i][j] = sum_c X[i][c] * W[j][c], as in quant_matmul.h).
//
// Packed layout: panel p (rows 16p .. 16p+15; rows past n are zero padding) starts at
// data + p * PanelBytes(type, k); inside it, 32-weight block b is one record of
// RecordBytes(type) bytes at b * RecordBytes(type):
//   Q4_0, Q4_1 (320 bytes): fp16 d[16], fp16 m[16], then 16 groups of 16 bytes; byte r of
//     group g is byte g of row r's nibbles (low nibble: weight g, high: weight g + 16),
//     w = d*q + m (Q4_0 is stored with m = -8d, exact in fp16).
//   Q8_0 (544 bytes): fp16 d[16], then 32 groups of 16 int8; byte r of group g is weight
//     g of row r; w = d*q.
// The bytes are the GGUF's, rearranged: a record holds exactly 16 source blocks, so the
// packed matrix has the source's size (plus the padding of a last partial panel).
//
// Arithmetic per output (i, j), whatever the tile, the column split or the batch:
//   acc = 0; for each block b in order:
//     s = 0; for g in 0..15 (Q4): s = fma(q[g], x[32b+g], s); s = fma(q[g+16], x[32b+g+16], s)
//            (Q8_0: for g in 0..31: s = fma(q[g], x[32b+g], s))
//     acc = fma(s, d_b, acc); (Q4 only) acc = fma(m_b, xs_b, acc)
//   Y[i][j] = acc, where xs_b = the sum of X[i][32b .. 32b+31] (16-lane pairwise add, then
//   a fixed reduction). The m term makes this the "d * (q.x) + m * sum(x)" form used by
//   llama.cpp: within fp32 rounding of the reference, not bitwise equal to it.
// Thread-safety: pure functions; the packed bytes are immutable after PackWeights.
#ifndef WEFT_KERNELS_CPU_PACKED_MATMUL_H_
#define WEFT_KERNELS_CPU_PACKED_MATMUL_H_

#include <cstdint>

#include "common/ggml_types.h"
#include "kernels/cpu/quant_matmul.h"

namespace weft::kernels {

inline constexpr int64_t kPanelRows = 16;
// Longest row the packed kernel accepts (its per-token block sums live on the stack).
inline constexpr int64_t kPackedMaxK = 16384;

// True if `type` with rows of k weights can be packed and run on this CPU.
bool PackedMatmulSupported(GgmlType type, int64_t k);

int64_t PackedRecordBytes(GgmlType type);
int64_t PackedPanelBytes(GgmlType type, int64_t k);
// Bytes PackWeights writes for an n-row matrix.
int64_t PackedBytes(GgmlType type, int64_t n, int64_t k);

// Rearranges `src` (a row-major GGUF matrix, quant_matmul.h) into `dst`
// (PackedBytes(src.type, src.n, src.k) bytes).
void PackWeights(const QuantMatrix& src, uint8_t* dst);

// The packed matrix: what PackWeights wrote, plus the shape.
struct PackedMatrix {
  GgmlType type = GgmlType::kQ4_1;
  const uint8_t* data = nullptr;
  int64_t n = 0;
  int64_t k = 0;
};

// Columns [n_begin, n_end) of Y (any range; panels are computed whole and only the
// requested columns stored). Precondition: PackedMatmulSupported(w.type, w.k).
void PackedMatmul(const PackedMatrix& w, const float* x, int64_t ldx, int64_t m, float* y,
                  int64_t ldy, int64_t n_begin, int64_t n_end);

}  // namespace weft::kernels

#endif  // WEFT_KERNELS_CPU_PACKED_MATMUL_H_

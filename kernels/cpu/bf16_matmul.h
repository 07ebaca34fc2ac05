// Bf16 matmul on AMX tiles: Q4_0 / Q4_1 / Q8_0 weights, repacked at load (below), times
// activations rounded to bfloat16.
//
//   Y[i][j] = sum over c of  bf16(x[i][c]) * wb[j][c]
//   wb = bf16(fmaf(dw, q, mw))  for Q4_0 / Q4_1 (Q4_0 has mw = -8 * dw),
//        bf16(dw * q)           for Q8_0,           (RNE; the block's fp16 scales as fp32)
//
// Why not the int8 kernels' arithmetic on AMX: that needs an fp32 scale step for every
// 32-weight block of every output, and on these cores the AVX-512 work does not overlap
// the tile multiplies, so AMX int8 with that epilogue measured ~1.2x the VNNI kernel
// (kernels:cpu_quant_matmul_benchmark, amx_q4_1 vs vnni_q4_1). Bf16 tiles accumulate a
// whole row of K in fp32 inside the tile: the weights are dequantized once per call per
// 16-column panel (reused by every 16-row tile) and the only vector work per output is
// one store. The products are at least as accurate as the int8 path's (bf16 keeps 8
// bits of every activation; int8 blocks keep 7 bits of the block's largest). The price:
// dequantizing costs ~8 vector ops per 32 weights, against ~1 for `vpdpbusd` on nibbles,
// so at m = 1 (single-stream decode, weights cache-resident) this is ~2x slower than the
// int8 kernels.
//
// Arithmetic of an output (i, j), the same for every m, row position and column split
// (batch invariance), on the tiles and off them:
//   acc = 0
//   for each 32-value chunk c of K, in order:          (one TDPBF16PS)
//     se = 0; so = 0
//     for t = 0..15: se = se + a[32c + 2t] * w[32c + 2t]        (fp32, RNE; the products
//                    so = so + a[32c + 2t + 1] * w[32c + 2t + 1]  of bf16 values are exact)
//     acc = acc + (se + so)
//   Y[i][j] = acc
// with a = bf16(x[i]), w = the weights above, denormal inputs and results flushed to zero.
// That is what TDPBF16PS computes on Sapphire-Rapids-class cores (found by experiment and
// checked bitwise in bf16_matmul_test against Bf16MatmulReference). Calls of one or two
// rows run it in AVX-512 (no tile to fill), larger ones on the tiles.
//
// Weights: 16-column panels (columns past n are zero); panel p at
// data + p * Bf16PanelBytes(type, k), its block b (32 weights of K) one record at
// b * Bf16RecordBytes(type). A record holds the panel's 16 columns as the 16 rows of a B
// tile want them (row r: weights 2r and 2r + 1 of each column; tile word w = column w / 2
// for w < 16, 8 + (w - 16) / 2 otherwise, weight 2r + w % 2):
//   Q4_0 / Q4_1 (320 bytes): fp16 dw[16], fp16 mw[16] (Q4_0: mw = -8 * dw, exact), then
//     16 rows of 16 bytes; byte i of row r: low nibble = q of tile word i, high nibble =
//     q of tile word 16 + i.
//   Q8_0 (544 bytes): fp16 dw[16], then 16 rows of 32 bytes; byte i of row r = q (int8)
//     of tile word i.
// A B tile row's dword c thus holds column c's two weights (the even one in its low half).
//
// Activations: Bf16Rows in the tile layout the kernel loads: rows in tiles of 16, and in
// a tile, chunk c (32 values of K) of its 16 rows is 1 KB at
//   data + ((i / 16) * (k / 32) + c) * 512 + (i % 16) * 32        (uint16_t units),
// so a buffer for m rows holds Bf16RowsElements(m, k) values (whole tiles; rows past m
// are never read into a valid output). Made by ConvertRowsBf16 (RNE, as VCVTNEPS2BF16:
// denormals flush to zero).
// Thread-safety: pure functions; calls on disjoint column ranges may run concurrently.
#ifndef WEFT_KERNELS_CPU_BF16_MATMUL_H_
#define WEFT_KERNELS_CPU_BF16_MATMUL_H_

#include <cstdint>

#include "common/ggml_types.h"
#include "kernels/cpu/quant_matmul.h"

namespace weft::kernels {

// True on CPUs with usable AMX bf16 (CpuFeatures::HasAmxBf16()).
bool Bf16MatmulSupported();

struct Bf16Rows {
  int64_t k = 0;             // row length (multiple of 32)
  uint16_t* data = nullptr;  // 64-byte aligned, layout above
};

// uint16_t values of a Bf16Rows buffer for `rows` rows of k (whole 16-row tiles).
int64_t Bf16RowsElements(int64_t rows, int64_t k);

// Rows [row_begin, row_end) of x (rows ldx floats apart, out->k floats each) into the
// same rows of *out. Calls on disjoint row ranges may run concurrently. Precondition:
// Bf16MatmulSupported().
void ConvertRowsBf16(const float* x, int64_t ldx, int64_t row_begin, int64_t row_end,
                     Bf16Rows* out);

// Q4_0, Q4_1 and Q8_0 with k % 32 == 0 (the other quantized types have no bf16 records:
// under --kernels=amx they take the int8 kernels, worker/model/linear.h).
bool Bf16PackSupported(GgmlType type, int64_t k);
int64_t Bf16RecordBytes(GgmlType type);
int64_t Bf16PanelBytes(GgmlType type, int64_t k);
int64_t Bf16PackedBytes(GgmlType type, int64_t n, int64_t k);

struct Bf16PackedMatrix {
  GgmlType type = GgmlType::kQ4_1;
  const uint8_t* data = nullptr;
  int64_t n = 0;
  int64_t k = 0;
};

// Rearranges `src` (a row-major GGUF matrix, quant_matmul.h) into `dst`
// (Bf16PackedBytes(src.type, src.n, src.k) bytes). Runs on any CPU.
void PackBf16Weights(const QuantMatrix& src, uint8_t* dst);

// Columns [n_begin, n_end) of Y for rows 0..m-1 of x (x.k == w.k). Preconditions:
// Bf16MatmulSupported(), Bf16PackSupported(w.type, w.k).
void Bf16Matmul(const Bf16PackedMatrix& w, const Bf16Rows& x, int64_t m, float* y, int64_t ldy,
                int64_t n_begin, int64_t n_end);

// The arithmetic above in portable C++ (tests; slow): x is fp32 (rows ldx apart), rounded
// as ConvertRowsBf16 rounds. Equal to Bf16Matmul bitwise for inputs without denormals.
void Bf16MatmulReference(const Bf16PackedMatrix& w, const float* x, int64_t ldx, int64_t m,
                         float* y, int64_t ldy, int64_t n_begin, int64_t n_end);

// Benchmark ceiling: `iters` rounds of 4 independent TDPBF16PS (16 x 16 x 32); returns
// the multiply-adds done (0 without AMX bf16).
int64_t Bf16PeakLoop(int64_t iters);

}  // namespace weft::kernels

#endif  // WEFT_KERNELS_CPU_BF16_MATMUL_H_

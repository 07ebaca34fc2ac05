// QuantGemm: the fused dequantize + tensor-core GEMM for small batches of rows (m in
// (kMaxGemvRows, kMaxQuantGemmRows]: a decode batch or a small mixed step) over the
// quantized GEMV layout (quant_types.h) — the same weights QuantGemv reads, no extra
// copy — instead of cuBLAS on the dequantized bf16 copy, which reads 4x the bytes of
// 4-bit weights and is launch/tile-bound at the small n of the default models
// (n, k of 576..2,048).
//
//   y[i][j] = sum_c x[i][c] * W[j][c]  (+ y[i][j] when accumulate)   i < m, j < n, c < k
//
// Arithmetic: every weight is dequantized exactly (DequantizeRow's fp32 value) and
// rounded to bf16 — the bits DequantizeWeights gives cuBLAS's dense copy — and multiplied
// with the bf16 x by mma.sync m16n8k16 with fp32 accumulation. So QuantGemm and the
// cuBLAS path compute the same products and differ only in fp32 summation order.
// CPU twin: DequantizeRow + round to bf16 + an fp32/double matmul (the emulated test).
//
// Tiling (PlanQuantGemm): a CTA computes kQuantGemmTileRows (32) outputs j for
// tile_tokens (16, 32 or 64: the smallest that holds m, at most 64) rows i over a range
// of k; grid (n tiles, m tiles, splits). At n = 576 a 32 x 64 tile gives 18 CTAs per 64
// rows — far from 132 SMs — so when the tiles are fewer than the SMs, k is split over up
// to kQuantGemmMaxSplits CTAs (split-K, in 32-weight blocks, at least 2 per split), which
// write fp32 partials to a scratch buffer that a second kernel sums in split order (then
// adds y). Narrow tiles alone cannot reach the SMs at n = 576 (16-row tiles: 36 CTAs for
// m <= 64); split-K keeps the weight tile wide enough for one dequantized block per
// thread and lifts e.g. n = 576, m = 8 to 18 x 8 = 144 CTAs. Deterministic for a given
// shape and SM count: no atomics, a fixed order for every sum.
// Thread-safety: launches on the caller's stream; the scratch belongs to that stream.
#ifndef WEFT_KERNELS_CUDA_QUANT_GEMM_H_
#define WEFT_KERNELS_CUDA_QUANT_GEMM_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/quant_types.h"

namespace weft::kernels::cuda {

// Rows at most QuantGemm takes.
inline constexpr int32_t kMaxQuantGemmRows = 256;
// Outputs j per CTA, k splits at most, tokens per CTA at most.
inline constexpr int32_t kQuantGemmTileRows = 32;
inline constexpr int32_t kQuantGemmMaxSplits = 8;
inline constexpr int32_t kQuantGemmMaxTileTokens = 64;

struct QuantGemmGrid {
  int32_t tile_tokens = 16;  // rows i per CTA: 16, 32 or 64
  int64_t tiles_n = 0;       // grid.x
  int32_t tiles_m = 0;       // grid.y
  int32_t splits = 1;        // grid.z: k ranges (1: no scratch, y written directly)
};

// The launch shape for m rows, n outputs, k weights on a device of num_sms SMs (<= 1:
// never split). Split s takes 32-weight blocks [s B / splits, (s + 1) B / splits) of
// B = k / 32.
inline QuantGemmGrid PlanQuantGemm(int32_t m, int64_t n, int64_t k, int32_t num_sms) {
  QuantGemmGrid g;
  g.tile_tokens = m <= 16 ? 16 : m <= 32 ? 32 : kQuantGemmMaxTileTokens;
  g.tiles_n = (n + kQuantGemmTileRows - 1) / kQuantGemmTileRows;
  g.tiles_m = (m + g.tile_tokens - 1) / g.tile_tokens;
  const int64_t tiles = g.tiles_n * g.tiles_m;
  if (num_sms > 1 && tiles > 0 && tiles < num_sms) {
    const int64_t want = (num_sms + tiles - 1) / tiles;
    g.splits = static_cast<int32_t>(
        std::max<int64_t>(1, std::min<int64_t>({want, kQuantGemmMaxSplits, k / 32 / 2})));
  }
  return g;
}

// Scratch floats a split launch needs: splits x m x n (0 without splits).
inline int64_t QuantGemmScratchFloats(const QuantGemmGrid& g, int32_t m, int64_t n) {
  return g.splits > 1 ? int64_t{g.splits} * m * n : 0;
}

// An upper bound of QuantGemmScratchFloats over every shape for num_sms: splits > 1 only
// when the tiles T < num_sms, and splits <= ceil(num_sms / T), so splits * T < 2 num_sms
// and m * n <= T * 64 * 32. What a caller allocates once.
inline int64_t QuantGemmMaxScratchFloats(int32_t num_sms) {
  return 2 * int64_t{std::max(num_sms, 1)} * kQuantGemmMaxTileTokens * kQuantGemmTileRows;
}

// Where split-K may write its partials. partials == nullptr: never split.
struct QuantGemmScratch {
  int32_t num_sms = 0;        // the device's SM count (PlanQuantGemm's target)
  float* partials = nullptr;  // device, QuantGemmMaxScratchFloats(num_sms) floats
};

// y (fp32 rows, ldy apart) as above for 0 <= m <= kMaxQuantGemmRows rows of x (bf16 rows,
// ldx elements apart, ldx % 8 == 0, 16-byte aligned). w: any HasGemv type (Q4_0/Q4_1/
// Q8_0 repacked, Q5_0/Q5_1/Q4_K/Q5_K/Q6_K raw rows), as QuantGemv takes it.
// cudaErrorInvalidValue for other types, m out of range or a bad layout.
cudaError_t QuantGemm(const GemvWeights& w, const uint16_t* x, int64_t ldx, int32_t m,
                      float* y, int64_t ldy, bool accumulate, const QuantGemmScratch& scratch,
                      cudaStream_t stream);

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_QUANT_GEMM_H_

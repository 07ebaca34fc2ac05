// Weight kernels: dequantization of GGUF matrices to fp16/bf16 at load time, and the
// fused dequantizing GEMV for small batches (m <= 4 rows: decode of a few sequences),
// which streams the 4-bit/8-bit weights instead of their 16-bit copy. Batches of more
// rows over the same layout: QuantGemm (quant_gemm.h, tensor cores).
// CPU twins: DequantizeRow (common/ggml_types.h, then round to nearest even) and
// GemvReference (quant_repack.h).
// Thread-safety: launches on the caller's stream.
#ifndef WEFT_KERNELS_CUDA_QUANT_H_
#define WEFT_KERNELS_CUDA_QUANT_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/dtypes.h"
#include "kernels/cuda/paged_kv.h"
#include "kernels/cuda/quant_types.h"
#include "kernels/cuda/rope_kv.h"

namespace weft::kernels::cuda {

// Rows at most QuantGemv takes.
inline constexpr int32_t kMaxGemvRows = 4;

// dst[j][c] (n rows of k, dtype) = the exact value of GGUF weight (j, c), rounded to
// nearest even; row j of the GGUF bytes at src + j*src_row_stride (device memory).
// Types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; k % 32 == 0
// for every type, k % 256 == 0 for the K-quants.
cudaError_t DequantizeWeights(WeightType type, const void* src, int64_t src_row_stride,
                              int64_t n, int64_t k, void* dst, WeightDtype dtype,
                              cudaStream_t stream);

// y[i][j] = sum_c x[i][c] * W[j][c] (+ y[i][j] when accumulate) for i < m <= 4, j < n.
// x: bf16 rows (ldx elements apart, ldx % 8 == 0, 16-byte aligned), y: fp32 rows (ldy).
// One warp per output: lanes take 32-weight blocks in turn, fp32 sums, a fixed shuffle
// tree, so each output is one deterministic order whatever m is. w: Q4_0/Q4_1/Q8_0
// repacked, or Q5_0/Q5_1/Q4_K/Q5_K/Q6_K as raw GGUF rows (quant_types.h, HasGemv).
cudaError_t QuantGemv(const GemvWeights& w, const uint16_t* x, int64_t ldx, int32_t m,
                      float* y, int64_t ldy, bool accumulate, cudaStream_t stream);

// The fused gate/up projection + SwiGLU of a decode step: w is the [gate; up] matrix
// (n = 2 * ffn rows), and act[i][j] (bf16 bits, rows ld_act apart) = silu(g) * u with
// g, u = QuantGemv's outputs j and ffn + j of row i, for j < ffn — the same bits as
// QuantGemv into fp32 followed by SwiGlu (elementwise.h) with bf16 output, in one kernel
// and without the fp32 intermediate. One warp computes both rows of an output.
cudaError_t QuantGemvSwiGlu(const GemvWeights& w, const uint16_t* x, int64_t ldx, int32_t m,
                            uint16_t* act, int64_t ld_act, cudaStream_t stream);

// The RMSNorm before a decode step's projection folded into its GEMV (one kernel instead
// of RmsNorm + QuantGemv): the GEMV's input rows are RmsNorm(x) with weight[k] and eps,
// rounded to bf16 — RmsNorm (elementwise.h) with bf16 output followed by QuantGemv /
// QuantGemvSwiGlu, the same bits, without the bf16 intermediate in device memory. x: fp32
// rows ldx apart (ldx >= k; the residual stream, not written). Every block normalizes the
// m rows itself into m * k bf16 of shared memory: GemvNormFits(k, m) must hold.
struct GemvNorm {
  const float* x = nullptr;
  int64_t ldx = 0;
  const float* weight = nullptr;  // [k]
  float eps = 1e-5f;
};
inline constexpr int64_t kGemvNormMaxSmemBytes = 48 * 1024;  // no opt-in attribute needed
inline constexpr int64_t GemvNormSmemBytes(int64_t k, int32_t m) { return 2 * k * m; }
inline constexpr bool GemvNormFits(int64_t k, int32_t m) {
  return GemvNormSmemBytes(k, m) <= kGemvNormMaxSmemBytes;
}
cudaError_t QuantGemvNormed(const GemvWeights& w, const GemvNorm& norm, int32_t m, float* y,
                            int64_t ldy, bool accumulate, cudaStream_t stream);
cudaError_t QuantGemvNormedSwiGlu(const GemvWeights& w, const GemvNorm& norm, int32_t m,
                                  uint16_t* act, int64_t ld_act, cudaStream_t stream);

// The QKV projection of a decode step with its RoPE + paged KV write as the GEMV's
// epilogue (one kernel instead of QuantGemv + RopeAndWritePagedKv, rope_kv.h), optionally
// with the RMSNorm before it folded in too (norm set: x and ldx are unused, as in
// QuantGemvNormed). qkv rows (ld_qkv apart) get q rotated and k, v as projected; K (rotated)
// and V go to the cache at rope.slot_mapping[i] (< 0: skipped) — the bits of QuantGemv into
// fp32 followed by RopeAndWritePagedKv. rope's qkv, stride and num_tokens are unused (m
// rows). InvalidValue unless w.n == (rope.num_heads + 2 kv.num_kv_heads) kv.head_dim,
// head_dim % 8 == 0, rope.style is kNormal (adjacent pairs: both members of a pair in one
// block's chunk of 8 outputs), rot_dim even and <= head_dim, an int8 view has scales, and
// (with norm) GemvNormFits(k, m).
cudaError_t QuantGemvRopeKv(const GemvWeights& w, const uint16_t* x, int64_t ldx,
                            const GemvNorm* norm, int32_t m, float* qkv, int64_t ld_qkv,
                            const RopeKvArgs& rope, const PagedKvView& kv, cudaStream_t stream);

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_QUANT_H_

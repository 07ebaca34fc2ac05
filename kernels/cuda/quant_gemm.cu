// Kernels of quant_gemm.h: the fused dequantize + tensor-core GEMM and its split-K sum.
//
// QuantGemmKernel<type, kTileTokens>: 128 threads (4 warps) per CTA; CTA (bx, by, bz)
// computes outputs j in [32 bx, 32 bx + 32) for rows i in [kTileTokens by, ... +
// kTileTokens) over split bz's 32-weight blocks, in chunks of kChunkBlocks (4) blocks =
// 128 weights of k:
//   1. dequantize: thread t decodes block t % 4 of weight row t / 4 of the chunk
//      (LoadGemvBlock, quant_blocks.cuh), rounds its 32 weights to bf16 and stores them
//      as four 16-byte vectors into ws[row][32 (t % 4) ..];
//   2. x: the chunk's kTileTokens x 128 bf16 of x as 16-byte vector loads into xs
//      (rows past m, blocks past the split: zeros);
//   3. __syncthreads; warp w computes a 16-output x (kTileTokens / 2)-row block of the
//      tile — outputs 16 (w % 2) .., rows (kTileTokens / 2)(w / 2) .., skipping n8 tiles
//      wholly past m and blocks wholly past n (warp-uniform) — with the weights
//      as mma's A (16 outputs x k16, one ldmatrix.x4) and x as its B (k16 x 8 rows, two
//      32-bit shared loads per 8-row tile): the mma's M is the output dimension, so a
//      small m wastes at most 7 rows of an n8 tile, not 15 of an m16 one;
//   4. __syncthreads (the next chunk overwrites ws and xs).
// Epilogue: the C fragment (c0, c1 = C[g][2t..2t+1], c2, c3 = C[g+8][..], mma.cuh) is
// y[row 2t(+1)][output g(+8)] of the warp's block: stored to y (+ y when accumulate)
// without splits, else to partials[split][i][j] (fp32, m x n per split).
// Shared memory (static, 26 KiB at kTileTokens = 64): ws 32 x 136 and xs kTileTokens x
// 136 bf16 — rows padded by 8 elements (16 bytes) so that row r starts 4 banks after row
// r - 1: the ldmatrix rows and the B loads (rows g, words t) hit 32 distinct banks.
// Alignment: every shared row and every 32-weight block in it is 16-byte aligned
// (272-byte rows); x rows need ldx % 8 == 0 and a 16-byte aligned base.
// Each output's sum: the mma's (hardware-fixed) order within k16, k16 steps in k order,
// then splits in split order — the same for every launch of a shape.
// No double buffering: the dequantization of a chunk is not overlapped with the mma of
// the previous one inside a CTA (several CTAs per SM overlap instead).
//
// SplitKSumKernel: one thread per (i, j), grid-stride: y = (y +) sum over splits in order.
#include <algorithm>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/quant_blocks.cuh"
#include "kernels/cuda/quant_gemm.h"

namespace weft::kernels::cuda {
namespace {

constexpr int kQgThreads = 128;
constexpr int kChunkBlocks = 4;
constexpr int kChunk = kChunkBlocks * kQK;   // weights of k per shared stage
constexpr int kSmemStride = kChunk + 8;      // bf16 elements per shared row
constexpr int kSumThreads = 256;
static_assert(kQuantGemmTileRows * kChunkBlocks == kQgThreads, "one block per thread");

// Block b of weight row j, exactly dequantized and rounded to bf16, to 32 shared
// elements (16-byte aligned) as four vector stores; zeros when `valid` is false.
template <WeightType kType>
__device__ __forceinline__ void DequantToShared(const GemvWeights& w, int64_t j, int64_t b,
                                                bool valid, uint16_t* out) {
  __align__(16) uint32_t packed[kQK / 2];
  if (valid) {
    float q[kQK], dlo, dhi, mn;
    LoadGemvBlock<kType>(w, j, b, q, &dlo, &dhi, &mn);
    float v[kQK];
#pragma unroll
    for (int e = 0; e < kQK; ++e) {
      // DequantBlock's arithmetic (quant.cu): d q exact in fp32, then one rounded min add.
      const float prod = __fmul_rn(e < kQK / 2 ? dlo : dhi, q[e]);
      v[e] = HasMin<kType>() ? __fadd_rn(prod, mn) : prod;
    }
#pragma unroll
    for (int e = 0; e < kQK / 2; ++e) packed[e] = PackPair<__nv_bfloat16>(v[2 * e], v[2 * e + 1]);
  } else {
#pragma unroll
    for (int e = 0; e < kQK / 2; ++e) packed[e] = 0;
  }
  uint4* to = reinterpret_cast<uint4*>(out);
#pragma unroll
  for (int e = 0; e < 4; ++e) to[e] = reinterpret_cast<const uint4*>(packed)[e];
}

// The chunk's rows of x (kTileTokens x `valid_blocks` 32-element blocks) into xs.
template <int kTileTokens>
__device__ __forceinline__ void LoadXChunk(const __nv_bfloat16* __restrict__ x, int64_t ldx,
                                           int32_t m, int32_t m0, int64_t b0, int valid_blocks,
                                           uint16_t* xs) {
  constexpr int kVecsPerRow = kChunk / 8;
  for (int v = threadIdx.x; v < kTileTokens * kVecsPerRow; v += kQgThreads) {
    const int r = v / kVecsPerRow, c8 = v % kVecsPerRow;
    uint4 val{0, 0, 0, 0};
    if (m0 + r < m && c8 < valid_blocks * (kQK / 8)) {
      val = *reinterpret_cast<const uint4*>(x + (m0 + r) * ldx + b0 * kQK + c8 * 8);
    }
    *reinterpret_cast<uint4*>(xs + r * kSmemStride + c8 * 8) = val;
  }
}

template <WeightType kType, int kTileTokens>
__global__ void __launch_bounds__(kQgThreads)
    QuantGemmKernel(GemvWeights w, const __nv_bfloat16* __restrict__ x, int64_t ldx, int32_t m,
                    float* __restrict__ y, int64_t ldy, bool accumulate,
                    float* __restrict__ partials, int32_t splits) {
  constexpr int kWarpTokens = kTileTokens / 2;  // rows i per warp
  constexpr int kTiles8 = kWarpTokens / 8;      // mma n8 tiles per warp
  __shared__ __align__(16) uint16_t ws[kQuantGemmTileRows * kSmemStride];
  __shared__ __align__(16) uint16_t xs[kTileTokens * kSmemStride];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t n0 = int64_t{blockIdx.x} * kQuantGemmTileRows;
  const int32_t m0 = static_cast<int32_t>(blockIdx.y) * kTileTokens;
  const int64_t blocks = w.k / kQK;
  const int64_t b_begin = blocks * blockIdx.z / splits;
  const int64_t b_end = blocks * (blockIdx.z + 1) / splits;
  const int w_row = 16 * (warp & 1), x_row = kWarpTokens * (warp >> 1);
  // The warp's n8 tiles that hold rows < m, 0 when its 16 outputs are all >= n: the mma
  // of padding is skipped (warp-uniform, so the warp's collectives stay whole).
  const int live_tiles =
      n0 + w_row < w.n ? max(0, min(kTiles8, (m - (m0 + x_row) + 7) / 8)) : 0;
  // This thread's block of each chunk (step 1).
  const int d_row = threadIdx.x / kChunkBlocks, d_blk = threadIdx.x % kChunkBlocks;

  float acc[kTiles8][4];
#pragma unroll
  for (int i = 0; i < kTiles8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

  for (int64_t b0 = b_begin; b0 < b_end; b0 += kChunkBlocks) {
    const int nb = static_cast<int>(min(int64_t{kChunkBlocks}, b_end - b0));
    DequantToShared<kType>(w, n0 + d_row, b0 + d_blk, n0 + d_row < w.n && d_blk < nb,
                           ws + d_row * kSmemStride + d_blk * kQK);
    LoadXChunk<kTileTokens>(x, ldx, m, m0, b0, nb, xs);
    __syncthreads();
    for (int ks = 0; live_tiles > 0 && ks < 2 * nb; ++ks) {
      uint32_t a[4];
      LdMatrixX4(ws + (w_row + (lane & 15)) * kSmemStride + 16 * ks + 8 * (lane >> 4), a);
#pragma unroll
      for (int i = 0; i < kTiles8; ++i) {
        if (i >= live_tiles) break;
        const uint16_t* xr = xs + (x_row + 8 * i + g) * kSmemStride + 16 * ks + 2 * t;
        const uint32_t b[2] = {*reinterpret_cast<const uint32_t*>(xr),
                               *reinterpret_cast<const uint32_t*>(xr + 8)};
        Mma16816<__nv_bfloat16>(a, b, acc[i]);
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < kTiles8; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t j = n0 + w_row + g + 8 * (e >> 1);
      const int32_t row = m0 + x_row + 8 * i + 2 * t + (e & 1);
      if (j >= w.n || row >= m) continue;
      if (splits == 1) {
        float* out = y + row * ldy + j;
        *out = accumulate ? *out + acc[i][e] : acc[i][e];
      } else {
        partials[(int64_t{blockIdx.z} * m + row) * w.n + j] = acc[i][e];
      }
    }
  }
}

// y[i][j] = (y[i][j] +) sum_s partials[s][i][j], s in order.
__global__ void __launch_bounds__(kSumThreads)
    SplitKSumKernel(const float* __restrict__ partials, int32_t splits, int32_t m, int64_t n,
                    float* __restrict__ y, int64_t ldy, bool accumulate) {
  const int64_t total = int64_t{m} * n;
  for (int64_t v = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; v < total;
       v += int64_t{gridDim.x} * blockDim.x) {
    float s = partials[v];
    for (int32_t z = 1; z < splits; ++z) s += partials[z * total + v];
    float* out = y + (v / n) * ldy + v % n;
    *out = accumulate ? *out + s : s;
  }
}

}  // namespace

// Launch code (not part of the host emulation build).
#if !defined(WEFT_CUDA_HOST_EMULATION)
namespace {

template <WeightType kType>
void LaunchQuantGemm(const QuantGemmGrid& g, const GemvWeights& w, const __nv_bfloat16* x,
                     int64_t ldx, int32_t m, float* y, int64_t ldy, bool accumulate,
                     float* partials, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(g.tiles_n), static_cast<unsigned>(g.tiles_m),
                  static_cast<unsigned>(g.splits));
  switch (g.tile_tokens) {
    case 16:
      QuantGemmKernel<kType, 16><<<grid, kQgThreads, 0, stream>>>(w, x, ldx, m, y, ldy,
                                                                   accumulate, partials, g.splits);
      break;
    case 32:
      QuantGemmKernel<kType, 32><<<grid, kQgThreads, 0, stream>>>(w, x, ldx, m, y, ldy,
                                                                   accumulate, partials, g.splits);
      break;
    default:
      QuantGemmKernel<kType, 64><<<grid, kQgThreads, 0, stream>>>(w, x, ldx, m, y, ldy,
                                                                   accumulate, partials, g.splits);
      break;
  }
}

}  // namespace

cudaError_t QuantGemm(const GemvWeights& w, const uint16_t* x, int64_t ldx, int32_t m,
                      float* y, int64_t ldy, bool accumulate, const QuantGemmScratch& scratch,
                      cudaStream_t stream) {
  if (m < 0 || m > kMaxQuantGemmRows || w.k <= 0 || w.k % BlockWeights(w.type) != 0 ||
      ldx % 8 != 0 || w.n < 0 || !HasGemv(w.type) ||
      (w.type == WeightType::kQ4_1 && w.m == nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (m == 0 || w.n == 0) return cudaSuccess;
  const QuantGemmGrid g = PlanQuantGemm(m, w.n, w.k,
                                        scratch.partials != nullptr ? scratch.num_sms : 0);
  if (g.tiles_n > 0x7fffffff) return cudaErrorInvalidValue;
  const auto* xb = reinterpret_cast<const __nv_bfloat16*>(x);
  float* partials = g.splits > 1 ? scratch.partials : nullptr;
#define WEFT_QGEMM_CASE(T)                                                              \
  case WeightType::T:                                                                   \
    LaunchQuantGemm<WeightType::T>(g, w, xb, ldx, m, y, ldy, accumulate, partials, stream); \
    break;
  switch (w.type) {
    WEFT_QGEMM_CASE(kQ4_0)
    WEFT_QGEMM_CASE(kQ4_1)
    WEFT_QGEMM_CASE(kQ8_0)
    WEFT_QGEMM_CASE(kQ5_0)
    WEFT_QGEMM_CASE(kQ5_1)
    WEFT_QGEMM_CASE(kQ4_K)
    WEFT_QGEMM_CASE(kQ5_K)
    WEFT_QGEMM_CASE(kQ6_K)
    default:
      return cudaErrorInvalidValue;
  }
#undef WEFT_QGEMM_CASE
  if (g.splits > 1) {
    const int64_t total = int64_t{m} * w.n;
    const unsigned grid = static_cast<unsigned>(
        std::min<int64_t>(4096, (total + kSumThreads - 1) / kSumThreads));
    SplitKSumKernel<<<grid, kSumThreads, 0, stream>>>(partials, g.splits, m, w.n, y, ldy,
                                                      accumulate);
  }
  return cudaGetLastError();
}

#endif  // !WEFT_CUDA_HOST_EMULATION

}  // namespace weft::kernels::cuda

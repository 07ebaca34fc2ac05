// The kGrouped decode kernel of paged_attention.h: kPipelined's flash-decoding split-K
// (same grid, cp.async pipeline, last-CTA combination; decode_common.cuh), but each K/V
// element is converted from shared memory once per tile for ALL query heads of its KV
// head's group (kPipelined converts it once per head), int8 dequantized (scale applied)
// once per tile, and groups >= 4 on tensor cores.
//
// CTA = (KV head h, item, split). K/V of the split stream through shared memory in tiles
// of kTile token rows (64; 32 at head_dim 256), kStages = 3 stages deep: every thread
// issues 16-byte cp.async copies of whole rows (DecodeTileSource; rows past the split are
// zero-filled); rows are padded to kPitch = row bytes + 16. Two bodies, by group size:
//
// CUDA cores (groups 1-3; kGroup = the group): 128 threads, thread (tx, tz), tx fastest:
//   tx < kBdx = head_dim / 8   the 8 dims [8 tx, 8 tx + 8) of a K/V row (one 16-byte
//                              shared load; 8 bytes + one scale for int8)
//   tz < kBdz = 128 / kBdx     token lane: rows tz, tz + kBdz, ... of every tile
//   The thread holds q' = q * scale * log2 e of its 8 dims for EVERY head of the group
//   (8 x group floats) and converts its K chunk once: group dot products, each summed
//   over the kBdx lanes of the row by shuffles; then its V chunk once for the group's
//   flash-decoding updates (per head: running max m, sum d, o[8], base 2).
// Tensor cores (groups 4-32; kGroup = rows 16 or 32, query heads h * group + r for row
//   r < group, the rest zero q, never stored): kWarps = kTile / 16 warps (4; 2 at head_dim
//   256), warp w owns tokens [16 w, 16 w + 16) of every tile. Per tile and warp:
//     S = Q K^T   (rows x 16 tokens; q as A fragments in registers, K rows by ldmatrix)
//     mask rows past the split, online softmax per row (quad shuffles), P = 2^(S - m'),
//     O = O 2^(m - m') + P V   (P re-packed as A fragments, V by ldmatrix.trans)
//   with mma.sync m16n8k16 (mma.cuh): bf16 operands for bf16 KV, fp16 for fp16 and int8.
//   Int8 tiles are first dequantized (int8 x fp16 scale, rounded once to fp16) by all
//   threads into a fp16 tile [2][kTile][head_dim + 8], then read by ldmatrix.
// Both bodies end with one partial state (m, l, o[head_dim]) per (lane, row) — token lanes
// tz, or warps — written to shared memory (reusing the stages) and merged per row in a
// fixed order; one split writes out = o / l, several write o / l and the log-sum-exp for
// FinishDecodeSplits (the last CTA combines and resets the counter).
// Sliding windows, graph padding, q_rows, device-derived split lengths: DecodeSplitOf.
//
// Shared memory (dynamic): max(kStages x stage [+ the fp16 int8 tile], merge area):
//   stage = kTile x (2 x kPitch + 2 x scale-row bytes); merge = lanes x rows x (hd + 2) x 4
//   (4 KB for hd 128 / group 1 to 65 KB for hd 128 / 32 rows: never the larger term).
//   bf16/fp16: hd 64: 54 KB (4 CTAs/SM by shared memory), hd 128: 102 KB (2/SM), hd 256:
//   99 KB (2/SM). int8, CUDA cores / tensor cores (+ the fp16 tile): hd 64: 36 / 54 KB
//   (6 / 4 per SM), hd 128: 66 / 100 KB (3 / 2), hd 256: 63 / 96 KB (3 / 2). So 2-6
//   CTAs of 128 threads (64 at hd 256 on tensor cores) per SM, with 2 tiles per CTA in
//   flight (68-136 KB per SM at bf16): the bytes in flight, not threads, hide the latency.
// Registers (estimates from the live arrays, not measured: no GPU here): CUDA cores
// q, o and scores 8 + 8 + kTile / kBdz floats per head plus a converted chunk: ~80 + at
// group 3; tensor cores O (hd / 2) + q fragments (hd / 4) per 16 rows: 48 at hd 64, 96
// at hd 128, 192 at hd 256 (as the tensor-core prefill); 32 rows double it (hd 64: 96,
// hd 128: 192, which may spill — groups above 16 are rare).
// Bank conflicts: rows padded by 16 bytes, so the 8 row addresses of each ldmatrix hit
// distinct banks; cp.async stores and the CUDA-core 16-byte reads are consecutive chunks
// of a row (int8 at hd 64: two rows per 16-lane phase, at most 2-way); dequantized stores
// are 16-byte chunks of consecutive rows, padded likewise.
// Alignment (checked at launch): K/V rows, int8 scale rows and block strides are
// multiples of 16 bytes from 16-byte aligned bases; q 16-byte aligned, q_stride % 4 == 0.
#include <algorithm>
#include <atomic>

#include "kernels/cuda/decode_common.cuh"
#if !defined(WEFT_CUDA_HOST_EMULATION)
#include "kernels/cuda/launch.cuh"
#endif
#include "kernels/cuda/mma.cuh"

namespace weft::kernels::cuda {
namespace {

constexpr int kStages = 3;

template <typename KvT, int kHeadDim, int kGroup>
struct GroupedCfg {
  static constexpr bool kTc = kGroup >= kGroupedDecodeTensorCoreMinGroup;
  static constexpr int kTile = kHeadDim > 128 ? 32 : 64;
  static constexpr bool kInt8 = sizeof(KvT) == 1;
  static constexpr int kRowBytes = kHeadDim * static_cast<int>(sizeof(KvT));
  static constexpr int kPitch = kRowBytes + 16;
  using Source = DecodeTileSource<KvT, kHeadDim, kTile, kPitch>;
  // CUDA cores: kBdx x kBdz threads. Tensor cores: kWarps warps.
  static constexpr int kBdx = kHeadDim / 8;
  static constexpr int kBdz = 128 / kBdx;
  static constexpr int kWarps = kTc ? kTile / 16 : 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kDeqPitch = kHeadDim + 8;  // elements of the fp16 int8 tile
  static constexpr int kDeqBytes = kTc && kInt8 ? 2 * kTile * kDeqPitch * 2 : 0;
  // Partial states merged at the end: token lanes or warps, x rows.
  static constexpr int kLanes = kTc ? kWarps : kBdz;
  static constexpr int kMergeBytes = kLanes * kGroup * (kHeadDim + 2) * 4;
  static constexpr int kPipeBytes = kStages * Source::kStageBytes + kDeqBytes;
  static constexpr int kSmemBytes = kPipeBytes > kMergeBytes ? kPipeBytes : kMergeBytes;
  static_assert(kTc ? kGroup % 16 == 0 : kThreads == 128, "tensor-core rows come in 16s");
  static_assert(kTile % kBdz == 0 && kTile % 16 == 0, "lanes divide the tile");
};

// The merge area: o [lanes][rows][kHeadDim], then m [lanes][rows], then l [lanes][rows].
struct MergeArea {
  float* o;
  float* m;
  float* l;
};
template <typename C, int kHeadDim, int kGroup>
__device__ __forceinline__ MergeArea MergeAreaOf(uint8_t* smem) {
  float* o = reinterpret_cast<float*>(smem);
  float* m = o + C::kLanes * kGroup * kHeadDim;
  return {o, m, m + C::kLanes * kGroup};
}

// CUDA-core body (groups 1-3): leaves each token lane's state per head in the merge area.
template <typename KvT, int kHeadDim, int kGroup>
__device__ __forceinline__ void CoreBody(
    const DecodeAttentionArgs& a, const typename GroupedCfg<KvT, kHeadDim, kGroup>::Source& src,
    const DecodeSplit& sp, int h, uint8_t* smem) {
  using C = GroupedCfg<KvT, kHeadDim, kGroup>;
  constexpr int kTile = C::kTile;
  constexpr int kTokPerThread = kTile / C::kBdz;
  constexpr int kScaleRowHalves = C::Source::kScaleRowBytes / 2;
  const int tid = threadIdx.x;
  const int tx = tid % C::kBdx, tz = tid / C::kBdx;
  float q[kGroup][8];
  const float qs = a.scale * kDecodeLog2e;
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    Load8(a.q + sp.row * a.q_stride + int64_t{h * kGroup + g} * kHeadDim + tx * 8, q[g]);
#pragma unroll
    for (int v = 0; v < 8; ++v) q[g][v] *= qs;
  }
  float m[kGroup], d[kGroup], o[kGroup][8];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    m[g] = -INFINITY;
    d[g] = 0.0f;
#pragma unroll
    for (int v = 0; v < 8; ++v) o[g][v] = 0.0f;
  }
  const int num_tiles = (sp.n + kTile - 1) / kTile;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_tiles) src.template Load<C::kThreads>(smem + s * C::Source::kStageBytes, s, tid);
    CpAsyncCommit();
  }
  for (int t = 0; t < num_tiles; ++t) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();  // tile t landed for every thread; tile t - 1's stage is free
    if (t + kStages - 1 < num_tiles) {
      src.template Load<C::kThreads>(smem + ((t + kStages - 1) % kStages) * C::Source::kStageBytes,
                                     t + kStages - 1, tid);
    }
    CpAsyncCommit();
    const uint8_t* st = smem + (t % kStages) * C::Source::kStageBytes;
    const uint8_t* ks = st + tx * 8 * sizeof(KvT);
    const uint8_t* vs = ks + C::Source::kDataBytes;
    const uint16_t* kscale = reinterpret_cast<const uint16_t*>(st + C::Source::kScaleOffset);
    const uint16_t* vscale = kscale + kTile * kScaleRowHalves;
    const int valid_rows = min(kTile, sp.n - t * kTile);
    float s[kGroup][kTokPerThread], tile_max[kGroup];
#pragma unroll
    for (int g = 0; g < kGroup; ++g) tile_max[g] = -INFINITY;
#pragma unroll
    for (int j = 0; j < kTokPerThread; ++j) {
      const int r = tz + C::kBdz * j;
      float k8[8];  // converted (and dequantized) once for the whole group
      LoadChunk<KvT>(ks + r * C::kPitch, k8);
      if constexpr (C::kInt8) {
        const float sc = HalfBitsToFloat(kscale[r * kScaleRowHalves + tx]);
#pragma unroll
        for (int v = 0; v < 8; ++v) k8[v] *= sc;
      }
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int v = 0; v < 8; ++v) dot = fmaf(q[g][v], k8[v], dot);
        dot = GroupSum<C::kBdx>(dot);
        s[g][j] = r < valid_rows ? dot : -INFINITY;
        tile_max[g] = fmaxf(tile_max[g], s[g][j]);
      }
    }
    float m_use[kGroup];
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const float m_new = fmaxf(m[g], tile_max[g]);
      m_use[g] = m_new == -INFINITY ? 0.0f : m_new;  // nothing visible yet: p = 0
      const float alpha = exp2f(m[g] - m_use[g]);
      d[g] *= alpha;
#pragma unroll
      for (int v = 0; v < 8; ++v) o[g][v] *= alpha;
      m[g] = m_new;
    }
#pragma unroll
    for (int j = 0; j < kTokPerThread; ++j) {
      const int r = tz + C::kBdz * j;
      float v8[8];
      LoadChunk<KvT>(vs + r * C::kPitch, v8);
      if constexpr (C::kInt8) {
        const float sc = HalfBitsToFloat(vscale[r * kScaleRowHalves + tx]);
#pragma unroll
        for (int v = 0; v < 8; ++v) v8[v] *= sc;
      }
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        const float p = exp2f(s[g][j] - m_use[g]);  // 0 for masked rows (V rows are zeros)
        d[g] += p;
#pragma unroll
        for (int v = 0; v < 8; ++v) o[g][v] = fmaf(p, v8[v], o[g][v]);
      }
    }
  }
  CpAsyncWait<0>();
  __syncthreads();  // every stage consumed: shared memory becomes the merge area
  const MergeArea ma = MergeAreaOf<C, kHeadDim, kGroup>(smem);
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    const int slot = tz * kGroup + g;
#pragma unroll
    for (int v = 0; v < 8; ++v) ma.o[slot * kHeadDim + tx * 8 + v] = o[g][v];
    if (tx == 0) {
      ma.m[slot] = m[g];
      ma.l[slot] = d[g];
    }
  }
}

// Dequantizes the int8 K and V rows of stage `st` (scaled) into the fp16 tile `deq`.
template <typename C>
__device__ __forceinline__ void DequantizeTile(const uint8_t* st, __half* deq, int tid) {
  constexpr int kPerRow = C::kBdx;  // 8-element groups per row
  constexpr int kItems = 2 * C::kTile * kPerRow;
  constexpr int kScaleRowHalves = C::Source::kScaleRowBytes / 2;
  const uint16_t* scales = reinterpret_cast<const uint16_t*>(st + C::Source::kScaleOffset);
  for (int c = tid; c < kItems; c += C::kThreads) {
    const int which = c / (C::kTile * kPerRow);  // 0 K, 1 V
    const int cc = c % (C::kTile * kPerRow);
    const int r = cc / kPerRow, col = cc % kPerRow;
    *reinterpret_cast<uint4*>(deq + (which * C::kTile + r) * C::kDeqPitch + col * 8) =
        Int8x8ScaledToHalf(*reinterpret_cast<const uint2*>(st + which * C::Source::kDataBytes +
                                                           r * C::kPitch + col * 8),
                           scales[(which * C::kTile + r) * kScaleRowHalves + col]);
  }
}

// Tensor-core body (groups >= 4, kGroup = 16 or 32 rows): leaves each warp's state per
// row in the merge area.
template <typename KvT, int kHeadDim, int kGroup>
__device__ __forceinline__ void TcBody(
    const DecodeAttentionArgs& a, const typename GroupedCfg<KvT, kHeadDim, kGroup>::Source& src,
    const DecodeSplit& sp, int h, int group, uint8_t* smem) {
  using C = GroupedCfg<KvT, kHeadDim, kGroup>;
  using T = typename MmaTypeFor<KvT>::T;
  constexpr int kTile = C::kTile;
  constexpr int kMT = kGroup / 16;         // m-tiles of 16 rows
  constexpr int kKSteps = kHeadDim / 16;   // k-steps of S = Q K^T
  constexpr int kDimTiles = kHeadDim / 8;  // n-tiles of O
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;

  // q' as A fragments: row r = 16 mt + g (+ 8) is head h * group + r (zeros past group).
  uint32_t qf[kMT][kKSteps][4];
  {
    const float qs = a.scale * kDecodeLog2e;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {  // columns 2 t4 (a0, a1), 2 t4 + 8 (a2, a3)
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const int r = 16 * mt + g + 8 * i;
            float x0 = 0.0f, x1 = 0.0f;
            if (r < group) {
              const float2 v = *reinterpret_cast<const float2*>(a.q + sp.row * a.q_stride +
                                                                int64_t{h * group + r} * kHeadDim +
                                                                16 * kk + 8 * half + 2 * t4);
              x0 = v.x * qs;
              x1 = v.y * qs;
            }
            qf[mt][kk][2 * half + i] = PackPair<T>(x0, x1);
          }
        }
      }
    }
  }
  float o[kMT][kDimTiles][4], m[kMT][2], l[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
#pragma unroll
    for (int j = 0; j < kDimTiles; ++j)
      o[mt][j][0] = o[mt][j][1] = o[mt][j][2] = o[mt][j][3] = 0.0f;
  }
  __half* deq = reinterpret_cast<__half*>(smem + kStages * C::Source::kStageBytes);
  const int tok0 = 16 * warp;
  const int num_tiles = (sp.n + kTile - 1) / kTile;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_tiles) src.template Load<C::kThreads>(smem + s * C::Source::kStageBytes, s, tid);
    CpAsyncCommit();
  }
  for (int t = 0; t < num_tiles; ++t) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();  // tile t landed; tile t - 1's stage and the fp16 tile are free
    if (t + kStages - 1 < num_tiles) {
      src.template Load<C::kThreads>(smem + ((t + kStages - 1) % kStages) * C::Source::kStageBytes,
                                     t + kStages - 1, tid);
    }
    CpAsyncCommit();
    const uint8_t* st = smem + (t % kStages) * C::Source::kStageBytes;
    const T* kt;
    const T* vt;
    int pitch;  // elements
    if constexpr (C::kInt8) {
      DequantizeTile<C>(st, deq, tid);  // once per tile for every row of the group
      __syncthreads();
      kt = reinterpret_cast<const T*>(deq);
      vt = kt + kTile * C::kDeqPitch;
      pitch = C::kDeqPitch;
    } else {
      kt = reinterpret_cast<const T*>(st);
      vt = reinterpret_cast<const T*>(st + C::Source::kDataBytes);
      pitch = C::kPitch / 2;
    }
    const int valid_rows = min(kTile, sp.n - t * kTile);

    // S = Q K^T: the warp's 16 tokens as two n-tiles of 8.
    float sc[kMT][2][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int j = 0; j < 2; ++j) sc[mt][j][0] = sc[mt][j][1] = sc[mt][j][2] = sc[mt][j][3] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int kk = 0; kk < kKSteps; kk += 2) {
        // Matrices: tokens tok0 + 8j .. + 7 x dims 16 kk + 8 i, i = 0..3.
        uint32_t b[4];
        LdMatrixX4(kt + (tok0 + 8 * j + (lane & 7)) * pitch + 16 * kk + 8 * (lane >> 3), b);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          Mma16816<T>(qf[mt][kk], b, sc[mt][j]);
          Mma16816<T>(qf[mt][kk + 1], b + 2, sc[mt][j]);
        }
      }
    }
    // Mask, online softmax (base 2), P as A fragments (one k-step of 16 tokens).
    uint32_t pf[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (tok0 + 8 * j + 2 * t4 + (e & 1) >= valid_rows) sc[mt][j][e] = -INFINITY;
          tile_max[e >> 1] = fmaxf(tile_max[e >> 1], sc[mt][j][e]);
        }
      }
      float m_use[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(kFullMask, tile_max[i], 1));
        tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(kFullMask, tile_max[i], 2));
        const float m_new = fmaxf(m[mt][i], tile_max[i]);
        m_use[i] = m_new == -INFINITY ? 0.0f : m_new;  // nothing visible yet: p = 0
        const float alpha = exp2f(m[mt][i] - m_use[i]);
        m[mt][i] = m_new;
        l[mt][i] *= alpha;
#pragma unroll
        for (int jj = 0; jj < kDimTiles; ++jj) {
          o[mt][jj][2 * i] *= alpha;
          o[mt][jj][2 * i + 1] *= alpha;
        }
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float p0 = exp2f(sc[mt][j][0] - m_use[0]), p1 = exp2f(sc[mt][j][1] - m_use[0]);
        const float p2 = exp2f(sc[mt][j][2] - m_use[1]), p3 = exp2f(sc[mt][j][3] - m_use[1]);
        l[mt][0] += p0 + p1;
        l[mt][1] += p2 + p3;
        pf[mt][2 * j] = PackPair<T>(p0, p1);      // rows g: a0 / a2
        pf[mt][2 * j + 1] = PackPair<T>(p2, p3);  // rows g + 8: a1 / a3
      }
    }
    // O += P V.
#pragma unroll
    for (int jj = 0; jj < kDimTiles; jj += 2) {
      // Matrices: tokens tok0 + 8 (i & 1) .. + 7 x dims 8 jj + 8 (i >> 1), transposed.
      const int i = lane >> 3;
      uint32_t b[4];
      LdMatrixX4Trans(vt + (tok0 + 8 * (i & 1) + (lane & 7)) * pitch + 8 * jj + 8 * (i >> 1), b);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        Mma16816<T>(pf[mt], b, o[mt][jj]);
        Mma16816<T>(pf[mt], b + 2, o[mt][jj + 1]);
      }
    }
  }
  CpAsyncWait<0>();
  __syncthreads();  // every stage consumed: shared memory becomes the merge area
  const MergeArea ma = MergeAreaOf<C, kHeadDim, kGroup>(smem);
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      l[mt][i] += __shfl_xor_sync(kFullMask, l[mt][i], 1);
      l[mt][i] += __shfl_xor_sync(kFullMask, l[mt][i], 2);
      const int slot = warp * kGroup + 16 * mt + g + 8 * i;
#pragma unroll
      for (int jj = 0; jj < kDimTiles; ++jj) {
        ma.o[slot * kHeadDim + 8 * jj + 2 * t4] = o[mt][jj][2 * i];
        ma.o[slot * kHeadDim + 8 * jj + 2 * t4 + 1] = o[mt][jj][2 * i + 1];
      }
      if (t4 == 0) {
        ma.m[slot] = m[mt][i];
        ma.l[slot] = l[mt][i];
      }
    }
  }
}

template <typename KvT, int kHeadDim, int kGroup>
__global__ void __launch_bounds__(GroupedCfg<KvT, kHeadDim, kGroup>::kThreads)
    GroupedDecodeKernel(DecodeAttentionArgs a, PagedKvView kv) {
  using C = GroupedCfg<KvT, kHeadDim, kGroup>;
  WEFT_DYNAMIC_SMEM(uint8_t, smem);
  __shared__ int is_last;
  PdlBegin();  // launch.h
  const int h = blockIdx.x, item = blockIdx.y, split = blockIdx.z;
  const int tid = threadIdx.x;
  const int group = a.num_heads / kv.num_kv_heads;
  DecodeSplit sp;
  if (!DecodeSplitOf<kHeadDim, C::kTile>(a, group, h, item, split, tid, C::kThreads, &sp)) {
    return;
  }
  const typename C::Source src(a, kv, h, item, sp.start, sp.n);
  if constexpr (C::kTc) {
    TcBody<KvT, kHeadDim, kGroup>(a, src, sp, h, group, smem);
  } else {
    CoreBody<KvT, kHeadDim, kGroup>(a, src, sp, h, smem);
  }
  __syncthreads();  // every lane's state is in the merge area
  // Merge the lanes of each row (fixed order), then write the output or the partials.
  const MergeArea ma = MergeAreaOf<C, kHeadDim, kGroup>(smem);
  float* lse = DecodeLse(a, kHeadDim);
  for (int e = tid; e < group * kHeadDim; e += C::kThreads) {
    const int r = e / kHeadDim, dim = e % kHeadDim;
    float big = -INFINITY;
    for (int w = 0; w < C::kLanes; ++w) big = fmaxf(big, ma.m[w * kGroup + r]);
    float den = 0.0f, acc = 0.0f;
    for (int w = 0; w < C::kLanes; ++w) {
      const int slot = w * kGroup + r;
      const float wt = exp2f(ma.m[slot] - big);  // 0 for a lane that saw no token
      den = fmaf(wt, ma.l[slot], den);
      acc = fmaf(wt, ma.o[slot * kHeadDim + dim], acc);
    }
    const int head = h * group + r;
    if (sp.num_splits == 1) {
      StoreAct(a.out, sp.row * a.out_stride + int64_t{head} * kHeadDim + dim, acc / den,
               a.out_dtype);
    } else {
      const int64_t p = DecodePartialIndex(a, item, head, split);
      a.workspace[p * kHeadDim + dim] = acc / den;
      if (dim == 0) lse[p] = (big + log2f(den)) * kDecodeLn2;
    }
  }
  if (sp.num_splits > 1) {
    FinishDecodeSplits<kHeadDim>(a, kv, group, h, item, sp, tid, C::kThreads, &is_last);
  }
}

// Calls f.template Run<KvT, kHeadDim, kGroup>() for the instance serving `group` query
// heads per KV head: the group itself below 4, else 16 or 32 tensor-core rows.
template <typename KvT, int kHeadDim, typename F>
cudaError_t DispatchGroupedInstance(int group, const F& f) {
  switch (group) {
    case 1:
      return f.template Run<KvT, kHeadDim, 1>();
    case 2:
      return f.template Run<KvT, kHeadDim, 2>();
    case 3:
      return f.template Run<KvT, kHeadDim, 3>();
    default:
      break;
  }
  if (group >= 4 && group <= 16) return f.template Run<KvT, kHeadDim, 16>();
  if constexpr (kHeadDim <= 128) {
    if (group > 16 && group <= 32) return f.template Run<KvT, kHeadDim, 32>();
  }
  return cudaErrorInvalidValue;  // > MaxAttentionGroup(head_dim)
}

}  // namespace

// Launch code and host helpers (not part of the host emulation build).
#if !defined(WEFT_CUDA_HOST_EMULATION)
namespace {

struct GroupedLaunch {
  const DecodeAttentionArgs& a;
  const PagedKvView& kv;
  cudaStream_t stream;

  template <typename KvT, int kHeadDim, int kGroup>
  cudaError_t Run() const {
    using C = GroupedCfg<KvT, kHeadDim, kGroup>;
    auto kernel = GroupedDecodeKernel<KvT, kHeadDim, kGroup>;
    const cudaError_t e = SetSmemLimitOutsideCapture(kernel, C::kSmemBytes, stream);
    if (e != cudaSuccess) return e;
    const dim3 grid(kv.num_kv_heads, a.num_items, a.max_splits);
    return LaunchKernel(kernel, grid, dim3(C::kThreads), C::kSmemBytes, stream, a, kv);
  }
};

// The occupancy of one instance into *out (raising its shared memory limit first).
struct GroupedOccupancy {
  int32_t* out;

  template <typename KvT, int kHeadDim, int kGroup>
  cudaError_t Run() const {
    using C = GroupedCfg<KvT, kHeadDim, kGroup>;
    auto kernel = GroupedDecodeKernel<KvT, kHeadDim, kGroup>;
    int n = 0;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes) !=
            cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, C::kThreads, C::kSmemBytes) !=
            cudaSuccess) {
      cudaGetLastError();  // no device: clear the (non-sticky) error
      n = 0;
    }
    *out = n;
    return cudaSuccess;
  }
};

template <typename F>
struct ForGroup {
  int group;
  F f;
  template <typename KvT, int kHeadDim>
  cudaError_t operator()() const {
    return DispatchGroupedInstance<KvT, kHeadDim>(group, f);
  }
};
template <typename F>
cudaError_t DispatchGrouped(KvDtype dtype, int32_t head_dim, int32_t group, F f) {
  return DispatchKv(dtype, head_dim, ForGroup<F>{group, f});
}

// DispatchKv + group functor: the instance's configuration, for the estimate below.
struct GroupedShape {
  int32_t* threads;
  int32_t* smem;
  template <typename KvT, int kHeadDim, int kGroup>
  cudaError_t Run() const {
    *threads = GroupedCfg<KvT, kHeadDim, kGroup>::kThreads;
    *smem = GroupedCfg<KvT, kHeadDim, kGroup>::kSmemBytes;
    return cudaSuccess;
  }
};


}  // namespace

cudaError_t LaunchGroupedDecode(const DecodeAttentionArgs& args, const PagedKvView& kv,
                                cudaStream_t stream) {
  if (!DecodeOperandsAligned(args, kv)) return cudaErrorInvalidValue;
  const int32_t group = args.num_heads / kv.num_kv_heads;
  return DispatchGrouped(kv.dtype, kv.head_dim, group, GroupedLaunch{args, kv, stream});
}

cudaError_t PrepareGroupedDecode() {
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kBf16, KvDtype::kInt8}) {
    for (int32_t hd : {64, 128, 256}) {
      for (int32_t g : {1, 2, 3, 4, 32}) {  // every instance: 1, 2, 3, 16 and 32 rows
        if (g > MaxAttentionGroup(hd)) continue;
        int32_t n = 0;
        const cudaError_t e = DispatchGrouped(dt, hd, g, GroupedOccupancy{&n});
        if (e != cudaSuccess) return e;
        if (n == 0) return cudaErrorInvalidDeviceFunction;
      }
    }
  }
  return cudaSuccess;
}

int32_t GroupedDecodeCtasPerSm(KvDtype dtype, int32_t head_dim, int32_t group_size) {
  const int32_t g = std::max(1, std::min(group_size, MaxAttentionGroup(head_dim)));
  const int gi = g <= 3 ? g - 1 : g <= 16 ? 3 : 4;  // the instance: 1, 2, 3, 16, 32 rows
  const int di = static_cast<int>(dtype);
  const int hi = head_dim == 64 ? 0 : head_dim == 128 ? 1 : 2;
  // The runtime's occupancy calculator (registers included) when a device is present,
  // cached per instance; otherwise an estimate from shared memory and threads.
  static std::atomic<int32_t> cache[3][3][5] = {};
  if (di < 0 || di >= 3 || !AttentionHeadDimSupported(head_dim)) return 1;
  int32_t n = cache[di][hi][gi].load(std::memory_order_relaxed);
  if (n == 0) {
    if (DispatchGrouped(dtype, head_dim, g, GroupedOccupancy{&n}) != cudaSuccess) n = 0;
    if (n > 0) cache[di][hi][gi].store(n, std::memory_order_relaxed);
  }
  if (n > 0) return n;
  int32_t threads = 128, smem = 0;
  if (DispatchGrouped(dtype, head_dim, g, GroupedShape{&threads, &smem}) != cudaSuccess) {
    return 1;
  }
  const int32_t by_smem = (228 * 1024) / (smem + 1024);  // + static, reserved
  const int32_t by_threads = 2048 / threads;
  return std::max(1, std::min({by_smem, by_threads, 32}));
}

#endif  // !WEFT_CUDA_HOST_EMULATION

}  // namespace weft::kernels::cuda

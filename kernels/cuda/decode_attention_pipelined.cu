// The kPipelined decode kernel of paged_attention.h (flash-decoding, split-K, the
// splits combined by the last CTA) and its split planner.
//
// CTA = (KV head h, item, split); kThreads = kBdx * kGroup * kBdz threads, thread
// (tx, ty, tz) with tx fastest:
//   tx < kBdx = head_dim / 8   the 8 dims [8 tx, 8 tx + 8) of a K/V row: one 16-byte
//                              shared load (8 bytes + one fp16 scale for int8: exactly
//                              one int8 group)
//   ty < kGroup                query head h * group + ty (kGroup = group rounded up to a
//                              power of two; heads ty >= group compute on zeros, unused)
//   tz < kBdz                  token lane: tokens tz, tz + kBdz, ... of every tile
// kBdz = max(1, 128 / (kBdx * kGroup)), so kThreads is 128 for groups up to 4 (hd 256), 8
// (hd 128) or 16 (hd 64), and 256/512 for larger groups (at most 16 at hd 256).
// With a sliding window the item's keys are [lo, ctx), lo = max(0, ctx - window): the
// splits cut that range (split z covers lo + z * partition_size ...), the rest is as
// without one.
//
// K/V of the split stream through shared memory in tiles of kTile = 32 token rows (K rows,
// V rows, then for int8 the K and V scale rows), kStages = 3 stages deep: every thread
// issues 16-byte cp.async copies of whole rows (row r of a tile = position start + 32 t
// + r, read through the block table; rows past the context are zero-filled), so
// (kStages - 1) tiles per CTA are in flight while one is consumed. The group's query
// heads all read the same tile: K/V leave HBM once per (item, KV head, split).
// Per tile a thread computes its tokens' scores s = q'.K (q' = q * scale * log2 e, dot
// over its 8 dims, then a shuffle sum over the kBdx lanes of its row), then the
// flash-decoding update of its private state (running max m, sum d, o[8]) in base 2:
//   m' = max(m, max_j s_j);  d = d 2^(m - m') + sum_j 2^(s_j - m');  o likewise with V_j.
// After the last tile the kBdz token lanes of a head are merged through shared memory
// (reusing the stages). One split: out = o / d. Several: the split writes o / d and
// lse = (m + log2 d) ln 2 to the workspace (decode_attention.cu's layout), then bumps
// the (item, KV head) counter (args.split_counters, a buffer of its own with a layout
// independent of the plan: see paged_attention.h); the CTA that brings it to the split
// count combines all splits (weights exp(lse_p - max lse)) and resets the counter to
// zero, so every launch leaves the counters as it found them.
//
// Shared memory: kStages * kTile * (2 * row bytes + 2 * scale-row bytes), e.g. 48 KB for
// bf16 head_dim 128 (4 CTAs per SM), 30 KB for int8 (7 per SM), 96 KB for bf16 head_dim
// 256 (2 per SM).
// Bank conflicts: a warp reads 16-byte chunks of one or two (contiguous) rows, and
// writes consecutive chunks: none beyond the minimum wavefronts.
// Alignment (checked at launch): K/V rows, int8 scale rows and block strides are
// multiples of 16 bytes from 16-byte aligned bases.
#include <algorithm>
#include <atomic>

#include "kernels/cuda/decode_common.cuh"
#if !defined(WEFT_CUDA_HOST_EMULATION)
#include "kernels/cuda/launch.cuh"
#endif

namespace weft::kernels::cuda {
namespace {

constexpr int kTile = kPipelinedDecodeTileTokens;
constexpr int kStages = 3;
constexpr int kVec = 8;
constexpr float kLog2e = kDecodeLog2e;
constexpr float kLn2 = kDecodeLn2;

template <typename KvT, int kHeadDim, int kGroup>
struct Cfg {
  static constexpr int kBdx = kHeadDim / kVec;
  static constexpr int kBdz = 128 / (kBdx * kGroup) > 1 ? 128 / (kBdx * kGroup) : 1;
  static constexpr int kThreads = kBdx * kGroup * kBdz;
  static constexpr int kTokPerThread = kTile / kBdz;
  static constexpr bool kInt8 = sizeof(KvT) == 1;
  static constexpr int kRowBytes = kHeadDim * static_cast<int>(sizeof(KvT));
  using Source = DecodeTileSource<KvT, kHeadDim, kTile, kRowBytes>;  // dense rows
  static constexpr int kScaleRowBytes = Source::kScaleRowBytes;
  static constexpr int kStageBytes = Source::kStageBytes;
  static constexpr int kMergeBytes = kGroup * kBdz * (kHeadDim + 2) * 4;
  static constexpr int kSmemBytes =
      kStages * kStageBytes > kMergeBytes ? kStages * kStageBytes : kMergeBytes;
  static_assert(kThreads % 32 == 0 && kThreads <= 512, "whole warps, at most 512");
  static_assert(kTile % kBdz == 0, "token lanes divide the tile");
};

template <typename KvT, int kHeadDim, int kGroup>
__global__ void __launch_bounds__(Cfg<KvT, kHeadDim, kGroup>::kThreads)
    PipelinedDecodeKernel(DecodeAttentionArgs a, PagedKvView kv) {
  using C = Cfg<KvT, kHeadDim, kGroup>;
  WEFT_DYNAMIC_SMEM(uint8_t, smem);
  __shared__ int is_last;
  PdlBegin();  // launch.h

  const int h = blockIdx.x, item = blockIdx.y, split = blockIdx.z;
  const int tid = threadIdx.x;
  const int tx = tid % C::kBdx;
  const int ty = (tid / C::kBdx) % kGroup;
  const int tz = tid / (C::kBdx * kGroup);
  const int group = a.num_heads / kv.num_kv_heads;
  DecodeSplit sp;
  if (!DecodeSplitOf<kHeadDim, kTile>(a, group, h, item, split, tid, C::kThreads, &sp)) return;
  const int n = sp.n;
  const int num_splits = sp.num_splits;
  const int64_t row = sp.row;
  const int head = h * group + ty;
  const bool active = ty < group;

  // q' = q * scale * log2(e), this thread's 8 dims.
  float q[kVec];
  {
    const float qs = a.scale * kLog2e;
    if (active) {
      Load8(a.q + row * a.q_stride + int64_t{head} * kHeadDim + tx * kVec, q);
    } else {
#pragma unroll
      for (int v = 0; v < kVec; ++v) q[v] = 0.0f;
    }
#pragma unroll
    for (int v = 0; v < kVec; ++v) q[v] *= qs;
  }

  const typename C::Source source(a, kv, h, item, sp.start, n);
  const int num_tiles = (n + kTile - 1) / kTile;
  auto load_tile = [&](int t, int stage) {
    source.template Load<C::kThreads>(smem + stage * C::kStageBytes, t, tid);
  };

  float m = -INFINITY, d = 0.0f, o[kVec];
#pragma unroll
  for (int v = 0; v < kVec; ++v) o[v] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_tiles) load_tile(s, s);
    CpAsyncCommit();
  }
  for (int t = 0; t < num_tiles; ++t) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();  // tile t landed for every thread; tile t - 1's stage is free
    if (t + kStages - 1 < num_tiles) load_tile(t + kStages - 1, (t + kStages - 1) % kStages);
    CpAsyncCommit();

    const uint8_t* st = smem + (t % kStages) * C::kStageBytes;
    const uint8_t* ks = st;
    const uint8_t* vs = st + C::Source::kDataBytes;
    const uint16_t* kscale = reinterpret_cast<const uint16_t*>(st + C::Source::kScaleOffset);
    const uint16_t* vscale = kscale + kTile * (C::kScaleRowBytes / 2);
    const int valid_rows = min(kTile, n - t * kTile);
    float s[C::kTokPerThread];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < C::kTokPerThread; ++j) {
      const int r = tz + C::kBdz * j;
      float k8[kVec];
      LoadChunk<KvT>(ks + r * C::kRowBytes + tx * kVec * sizeof(KvT), k8);
      float dot = 0.0f;
#pragma unroll
      for (int v = 0; v < kVec; ++v) dot = fmaf(q[v], k8[v], dot);
      if constexpr (C::kInt8) {
        dot *= HalfBitsToFloat(kscale[r * (C::kScaleRowBytes / 2) + tx]);
      }
      dot = GroupSum<C::kBdx>(dot);
      s[j] = r < valid_rows ? dot : -INFINITY;
      tile_max = fmaxf(tile_max, s[j]);
    }
    const float m_new = fmaxf(m, tile_max);
    if (m_new != -INFINITY) {  // false only for rows with no visible token
      const float alpha = exp2f(m - m_new);
      d *= alpha;
#pragma unroll
      for (int v = 0; v < kVec; ++v) o[v] *= alpha;
#pragma unroll
      for (int j = 0; j < C::kTokPerThread; ++j) {
        const int r = tz + C::kBdz * j;
        float p = exp2f(s[j] - m_new);  // 0 for masked rows (whose V rows are zeros)
        d += p;
        float v8[kVec];
        LoadChunk<KvT>(vs + r * C::kRowBytes + tx * kVec * sizeof(KvT), v8);
        if constexpr (C::kInt8) p *= HalfBitsToFloat(vscale[r * (C::kScaleRowBytes / 2) + tx]);
#pragma unroll
        for (int v = 0; v < kVec; ++v) o[v] = fmaf(p, v8[v], o[v]);
      }
      m = m_new;
    }
  }
  CpAsyncWait<0>();
  __syncthreads();  // every stage consumed: shared memory becomes the merge area

  // Merge the kBdz token lanes of each head (fixed order z = 0, 1, ...).
  if constexpr (C::kBdz > 1) {
    float* mo = reinterpret_cast<float*>(smem);                 // [kGroup][kBdz][kHeadDim]
    float* mm = mo + kGroup * C::kBdz * kHeadDim;                // [kGroup][kBdz]
    float* md = mm + kGroup * C::kBdz;                           // [kGroup][kBdz]
    const int slot = ty * C::kBdz + tz;
#pragma unroll
    for (int v = 0; v < kVec; ++v) mo[slot * kHeadDim + tx * kVec + v] = o[v];
    if (tx == 0) {
      mm[slot] = m;
      md[slot] = d;
    }
    __syncthreads();
    if (tz == 0) {
      float big = -INFINITY;
      for (int z = 0; z < C::kBdz; ++z) big = fmaxf(big, mm[ty * C::kBdz + z]);
      d = 0.0f;
#pragma unroll
      for (int v = 0; v < kVec; ++v) o[v] = 0.0f;
      for (int z = 0; z < C::kBdz; ++z) {
        const int sz = ty * C::kBdz + z;
        const float w = exp2f(mm[sz] - big);  // 0 for a lane that saw no token
        d = fmaf(w, md[sz], d);
#pragma unroll
        for (int v = 0; v < kVec; ++v) o[v] = fmaf(w, mo[sz * kHeadDim + tx * kVec + v], o[v]);
      }
      m = big;
    }
  }
  const bool writer = tz == 0 && active;
  if (num_splits == 1) {
    if (writer) {
      const float inv = 1.0f / d;
      const int64_t base = row * a.out_stride + int64_t{head} * kHeadDim + tx * kVec;
#pragma unroll
      for (int v = 0; v < kVec; ++v) StoreAct(a.out, base + v, o[v] * inv, a.out_dtype);
    }
    return;
  }
  float* lse = DecodeLse(a, kHeadDim);
  if (writer) {
    const int64_t p = DecodePartialIndex(a, item, head, split);
    const float inv = 1.0f / d;
#pragma unroll
    for (int v = 0; v < kVec; ++v) a.workspace[p * kHeadDim + tx * kVec + v] = o[v] * inv;
    if (tx == 0) lse[p] = (m + log2f(d)) * kLn2;
  }
  FinishDecodeSplits<kHeadDim>(a, kv, group, h, item, sp, tid, C::kThreads, &is_last);
}

}  // namespace

// Launch code and host helpers (not part of the host emulation build).
#if !defined(WEFT_CUDA_HOST_EMULATION)
namespace {

template <typename KvT, int kHeadDim, int kGroup>
cudaError_t LaunchPipelined(const DecodeAttentionArgs& a, const PagedKvView& kv,
                            cudaStream_t stream) {
  using C = Cfg<KvT, kHeadDim, kGroup>;
  auto kernel = PipelinedDecodeKernel<KvT, kHeadDim, kGroup>;
  // Always: 48 KB of dynamic memory plus the static `is_last` is already past the
  // default limit. (A host call: graph replays do not repeat it.)
  const cudaError_t e = SetSmemLimitOutsideCapture(kernel, C::kSmemBytes, stream);
  if (e != cudaSuccess) return e;
  const dim3 grid(kv.num_kv_heads, a.num_items, a.max_splits);
  return LaunchKernel(kernel, grid, dim3(C::kThreads), C::kSmemBytes, stream, a, kv);
}

struct PipelinedLauncher {
  const DecodeAttentionArgs& a;
  const PagedKvView& kv;
  cudaStream_t stream;
  int group;

  template <typename KvT, int kHeadDim>
  cudaError_t operator()() const {
    if (group <= 1) return LaunchPipelined<KvT, kHeadDim, 1>(a, kv, stream);
    if (group <= 2) return LaunchPipelined<KvT, kHeadDim, 2>(a, kv, stream);
    if (group <= 4) return LaunchPipelined<KvT, kHeadDim, 4>(a, kv, stream);
    if (group <= 8) return LaunchPipelined<KvT, kHeadDim, 8>(a, kv, stream);
    if (group <= 16) return LaunchPipelined<KvT, kHeadDim, 16>(a, kv, stream);
    if constexpr (kHeadDim / kVec * 32 <= 512) {
      return LaunchPipelined<KvT, kHeadDim, 32>(a, kv, stream);
    }
    return cudaErrorInvalidValue;  // > MaxAttentionGroup(head_dim)
  }
};

template <typename KvT, int kHeadDim, int kGroup>
int32_t Occupancy() {
  using C = Cfg<KvT, kHeadDim, kGroup>;
  auto kernel = PipelinedDecodeKernel<KvT, kHeadDim, kGroup>;
  int n = 0;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           C::kSmemBytes) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, C::kThreads, C::kSmemBytes) !=
          cudaSuccess) {
    cudaGetLastError();  // no device: clear the (non-sticky) error
    return 0;
  }
  return n;
}

// DispatchKv functor: the occupancy of one kernel instance, into *out.
struct OccupancyQuery {
  int32_t group;
  int32_t* out;

  template <typename KvT, int kHeadDim>
  cudaError_t operator()() const {
    switch (group) {
      case 1: *out = Occupancy<KvT, kHeadDim, 1>(); break;
      case 2: *out = Occupancy<KvT, kHeadDim, 2>(); break;
      case 4: *out = Occupancy<KvT, kHeadDim, 4>(); break;
      case 8: *out = Occupancy<KvT, kHeadDim, 8>(); break;
      case 16: *out = Occupancy<KvT, kHeadDim, 16>(); break;
      default:
        if constexpr (kHeadDim / kVec * 32 <= 512) {
          *out = Occupancy<KvT, kHeadDim, 32>();
        } else {
          *out = Occupancy<KvT, kHeadDim, 16>();  // larger groups are refused at launch
        }
        break;
    }
    return cudaSuccess;
  }
};

int32_t NextPow2(int32_t x) {
  int32_t p = 1;
  while (p < x) p *= 2;
  return p;
}

}  // namespace

cudaError_t LaunchPipelinedDecode(const DecodeAttentionArgs& args, const PagedKvView& kv,
                                  cudaStream_t stream) {
  if (!DecodeOperandsAligned(args, kv)) return cudaErrorInvalidValue;
  const int32_t group = args.num_heads / kv.num_kv_heads;
  return DispatchKv(kv.dtype, kv.head_dim, PipelinedLauncher{args, kv, stream, group});
}

cudaError_t PreparePipelinedDecode() {
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kBf16, KvDtype::kInt8}) {
    for (int32_t hd : {64, 128, 256}) {
      for (int32_t g : {1, 2, 4, 8, 16, 32}) {
        if (g > MaxAttentionGroup(hd)) continue;
        int32_t n = 0;
        const cudaError_t e = DispatchKv(dt, hd, OccupancyQuery{g, &n});  // sets the limit
        if (e != cudaSuccess) return e;
        if (n == 0) return cudaErrorInvalidDeviceFunction;
      }
    }
  }
  return cudaSuccess;
}

int32_t PipelinedDecodeCtasPerSm(KvDtype dtype, int32_t head_dim, int32_t group_size) {
  const int32_t g = NextPow2(std::max(1, std::min(group_size, kMaxGroupSize)));
  const int gi = __builtin_ctz(static_cast<unsigned>(g));  // 0..5
  const int di = static_cast<int>(dtype);
  const int hi = head_dim == 64 ? 0 : head_dim == 128 ? 1 : 2;
  // The runtime's occupancy calculator (registers included) when a device is present,
  // cached per kernel; otherwise an estimate from shared memory and threads.
  static std::atomic<int32_t> cache[3][3][6] = {};
  if (di >= 0 && di < 3 && AttentionHeadDimSupported(head_dim)) {
    int32_t n = cache[di][hi][gi].load(std::memory_order_relaxed);
    if (n == 0) {
      if (DispatchKv(dtype, head_dim, OccupancyQuery{g, &n}) != cudaSuccess) n = 0;
      if (n > 0) cache[di][hi][gi].store(n, std::memory_order_relaxed);
    }
    if (n > 0) return n;
  }
  const int32_t bdx = head_dim / kVec;
  const int32_t bdz = std::max(1, 128 / (bdx * g));
  const int32_t threads = bdx * g * bdz;
  const int32_t scale_row = dtype == KvDtype::kInt8 ? head_dim / kKvInt8Group * 2 : 0;
  const int32_t stage = kTile * (2 * head_dim * KvElementBytes(dtype) + 2 * scale_row);
  const int32_t merge = g * bdz * (head_dim + 2) * 4;
  const int32_t smem = std::max(kStages * stage, merge) + 1024;  // + static, reserved
  const int32_t by_smem = (228 * 1024) / smem;
  const int32_t by_threads = 2048 / threads;
  const int32_t by_regs = 65536 / (threads * 128);  // the 16-bit kernels use ~128
  return std::max(1, std::min({by_smem, by_threads, by_regs, 32}));
}

#endif  // !WEFT_CUDA_HOST_EMULATION

}  // namespace weft::kernels::cuda

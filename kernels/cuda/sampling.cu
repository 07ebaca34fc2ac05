// Kernels of sampling.h. One 1024-thread block per row; everything that sums floats
// does so in a fixed order (per-thread strided partials, then a shuffle tree, then the 32
// warp totals in order), so results never depend on scheduling.
#include <climits>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/sampling.h"

namespace weft::kernels::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kSeen = 1 << 30;  // counts[]: seen flag | number of output occurrences
constexpr int kMarkThreads = 256;

struct Shared {
  float bins_w[kWarps][16];
  float bins[16];
  int hist[256];
  float f32[kWarps];
  int i32[kWarps];
  int best_i[kWarps];
  int chosen;
  int remaining;
  int found;
  float before;
};

__device__ __forceinline__ bool HasPenalties(const RowSamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
         p.frequency_penalty != 0.0f;
}

// Philox4x32-10 and the mapping of worker/philox.h (integer arithmetic only).
__device__ float SampleUniform(uint64_t seed, uint32_t sample_index, uint32_t output_index) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = sample_index, c1 = output_index, c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n1 = static_cast<uint32_t>(p1);
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    const uint32_t n3 = static_cast<uint32_t>(p0);
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
  }
  return static_cast<float>(c0 >> 8) * (1.0f / 16777216.0f);
}

// fp32 -> uint32 with the same order (any sign).
__device__ __forceinline__ uint32_t OrderKey(float x) {
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ int WarpSumInt(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ int BlockSumInt(int v, Shared& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpSumInt(v);
  __syncthreads();
  if (lane == 0) s.i32[warp] = v;
  __syncthreads();
  return WarpSumInt(lane < kWarps ? s.i32[lane] : 0);
}

__device__ float BlockSumF(float v, Shared& s) { return BlockSum(v, s.f32); }

// Exclusive prefix sum over threads in thread order (fixed association); *total gets the
// block total.
__device__ float BlockExclusiveScan(float v, Shared& s, float* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float n = __shfl_up_sync(kFullMask, incl, o);
    if (lane >= o) incl += n;
  }
  float excl = __shfl_up_sync(kFullMask, incl, 1);
  if (lane == 0) excl = 0.0f;
  __syncthreads();
  if (lane == 31) s.f32[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    float t = s.f32[lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float n = __shfl_up_sync(kFullMask, t, o);
      if (lane >= o) t += n;
    }
    s.f32[lane] = t;  // inclusive warp prefix
  }
  __syncthreads();
  *total = s.f32[kWarps - 1];
  return (warp > 0 ? s.f32[warp - 1] : 0.0f) + excl;
}

// The same for counts.
__device__ int BlockExclusiveScanInt(int v, Shared& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(kFullMask, incl, o);
    if (lane >= o) incl += n;
  }
  __syncthreads();
  if (lane == 31) s.i32[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int t = s.i32[lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int n = __shfl_up_sync(kFullMask, t, o);
      if (lane >= o) t += n;
    }
    s.i32[lane] = t;
  }
  __syncthreads();
  return (warp > 0 ? s.i32[warp - 1] : 0) + incl - v;
}

// Block-wide best (value, id) under `better`; every thread gets the winning id.
template <typename Better>
__device__ int BlockBest(float v, int id, Better better, Shared& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, v, o);
    const int oi = __shfl_xor_sync(kFullMask, id, o);
    if (better(ov, oi, v, id)) v = ov, id = oi;
  }
  __syncthreads();
  if (lane == 0) {
    s.f32[warp] = v;
    s.best_i[warp] = id;
  }
  __syncthreads();
  v = s.f32[lane];
  id = s.best_i[lane];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, v, o);
    const int oi = __shfl_xor_sync(kFullMask, id, o);
    if (better(ov, oi, v, id)) v = ov, id = oi;
  }
  return id;
}

// Contiguous id range of this thread (ascending-id scans).
__device__ __forceinline__ void MyChunk(int vocab, int* begin, int* end) {
  const int chunk = (vocab + kThreads - 1) / kThreads;
  *begin = min(vocab, static_cast<int>(threadIdx.x) * chunk);
  *end = min(vocab, *begin + chunk);
}

// The id of the n-th (1-based) token, in ascending id order, for which tie(t) holds.
template <typename Tie>
__device__ int NthTie(int vocab, int n, Tie tie, Shared& s) {
  int b, e;
  MyChunk(vocab, &b, &e);
  int mine = 0;
  for (int t = b; t < e; ++t) mine += tie(t) ? 1 : 0;
  const int excl = BlockExclusiveScanInt(mine, s);
  if (threadIdx.x == 0) s.found = INT_MAX;
  __syncthreads();
  if (excl < n && n <= excl + mine) {
    int seen = excl;
    for (int t = b; t < e; ++t) {
      if (tie(t) && ++seen == n) {
        s.found = t;
        break;
      }
    }
  }
  __syncthreads();
  return s.found;
}

// The first token, in the order (w desc, id asc) over tokens with pred(t, w[t]), at
// which the running sum of w reaches `target` (strict: exceeds it). Returns false if the
// sums never get there (rounding); else its key (fp32 bits of w) and id.
template <typename Pred>
__device__ bool FindCrossing(const float* w, int vocab, float target, bool strict, Pred pred,
                             Shared& s, uint32_t* key_out, int* id_out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t hi_bits = 0, hi_mask = 0;
  float before = 0.0f;  // sum of the tokens ordered before the current bucket
  for (int shift = 28; shift >= 0; shift -= 4) {
    float bins[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) bins[j] = 0.0f;
    for (int t = threadIdx.x; t < vocab; t += kThreads) {
      const float x = w[t];
      if (!pred(t, x)) continue;
      const uint32_t k = __float_as_uint(x);
      if ((k & hi_mask) != hi_bits) continue;
      const uint32_t b = (k >> shift) & 15u;
#pragma unroll
      for (int j = 0; j < 16; ++j) bins[j] += (static_cast<uint32_t>(j) == b) ? x : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const float v = WarpSum(bins[j]);
      if (lane == 0) s.bins_w[warp][j] = v;
    }
    __syncthreads();
    if (threadIdx.x < 16) {
      float acc = 0.0f;
      for (int wi = 0; wi < kWarps; ++wi) acc += s.bins_w[wi][threadIdx.x];
      s.bins[threadIdx.x] = acc;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float run = before;
      int chosen = -1;
      for (int b = 15; b >= 0; --b) {
        const float next = run + s.bins[b];
        if (strict ? next > target : next >= target) {
          chosen = b;
          break;
        }
        run = next;
      }
      s.chosen = chosen;
      s.before = run;
    }
    __syncthreads();
    if (s.chosen < 0) return false;
    before = s.before;
    hi_bits |= static_cast<uint32_t>(s.chosen) << shift;
    hi_mask |= 15u << shift;
  }
  // Tokens with exactly this w, in ascending id order.
  auto tie = [&](int t) {
    const float x = w[t];
    return pred(t, x) && __float_as_uint(x) == hi_bits;
  };
  int b, e;
  MyChunk(vocab, &b, &e);
  float mine = 0.0f;
  for (int t = b; t < e; ++t) mine += tie(t) ? w[t] : 0.0f;
  float total;
  const float excl = BlockExclusiveScan(mine, s, &total);
  if (threadIdx.x == 0) s.found = INT_MAX;
  __syncthreads();
  float run = before + excl;
  for (int t = b; t < e; ++t) {
    if (!tie(t)) continue;
    run += w[t];
    if (strict ? run > target : run >= target) {
      atomicMin(&s.found, t);
      break;
    }
  }
  __syncthreads();
  int id = s.found;
  if (id == INT_MAX) {  // the bucket sums crossed, the element sums did not: last tie
    int last = -1;
    for (int t = b; t < e; ++t) last = tie(t) ? t : last;
    id = BlockBest(0.0f, last, [](float, int oi, float, int i) { return oi > i; }, s);
  }
  *key_out = hi_bits;
  *id_out = id;
  return true;
}

__global__ void __launch_bounds__(kMarkThreads) MarkHistoryKernel(SampleArgs a) {
  const int r = blockIdx.y;
  const RowSamplingParams p = a.params[r];
  if (!HasPenalties(p)) return;
  const int64_t h0 = a.history_offsets[r], h1 = a.history_offsets[r + 1];
  int32_t* counts = a.counts + int64_t{r} * a.vocab;
  for (int64_t i = h0 + blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < h1;
       i += int64_t{gridDim.x} * blockDim.x) {
    int32_t* c = counts + a.history[i];
    if (i - h0 >= p.num_prompt) atomicAdd(c, 1);
    atomicOr(c, kSeen);
  }
}

__global__ void __launch_bounds__(kThreads) SampleKernel(SampleArgs a) {
  __shared__ Shared s;
  const int r = blockIdx.x;
  const int vocab = a.vocab;
  const RowSamplingParams p = a.params[r];
  float* w = a.work + int64_t{r} * vocab;
  const int64_t logits_row = a.logits_rows != nullptr ? a.logits_rows[r] : r;
  const float* logits = a.logits + logits_row * a.logits_stride;
  for (int t = threadIdx.x; t < vocab; t += kThreads) {
    const float x = logits[t];
    w[t] = isnan(x) ? -INFINITY : x;
  }
  __syncthreads();
  // 1. Penalties: the first thread to clear a token's count applies them, once.
  if (HasPenalties(p)) {
    int32_t* counts = a.counts + int64_t{r} * vocab;
    const float rep = p.repetition_penalty;
    for (int64_t i = a.history_offsets[r] + threadIdx.x; i < a.history_offsets[r + 1];
         i += kThreads) {
      const int t = a.history[i];
      const int c = atomicExch(counts + t, 0);
      if (c == 0) continue;
      float x = w[t];
      if (rep != 1.0f) x = x > 0.0f ? __fdiv_rn(x, rep) : __fmul_rn(x, rep);
      const int n = c & (kSeen - 1);
      if (n > 0) {
        x = __fsub_rn(x, __fmul_rn(p.frequency_penalty, static_cast<float>(n)));
        x = __fsub_rn(x, p.presence_penalty);
      }
      w[t] = x;
    }
    __syncthreads();
  }
  // 2. Greedy: the largest l, lowest id among ties.
  auto higher = [](float ov, int oi, float v, int i) { return ov > v || (ov == v && oi < i); };
  if (p.temperature == 0.0f) {
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int t = threadIdx.x; t < vocab; t += kThreads) {
      if (higher(w[t], t, bv, bi)) bv = w[t], bi = t;
    }
    const int best = BlockBest(bv, bi, higher, s);
    if (threadIdx.x == 0) a.tokens[r] = w[best] == -INFINITY ? -1 : best;
    return;
  }
  // 3. Temperature.
  int mine = 0;
  float mx = -INFINITY;
  for (int t = threadIdx.x; t < vocab; t += kThreads) {
    const float x = __fdiv_rn(w[t], p.temperature);
    w[t] = x;
    mine += x != -INFINITY ? 1 : 0;
    mx = fmaxf(mx, x);
  }
  const int num_cand = BlockSumInt(mine, s);
  const float m = BlockMax(mx, s.f32);
  if (num_cand == 0) {
    if (threadIdx.x == 0) a.tokens[r] = -1;
    return;
  }
  // 4. top-k: the k-th largest key by radix select, then the tied ids to keep.
  const bool use_topk = p.top_k > 0 && p.top_k < num_cand;
  uint32_t k_key = 0;
  int k_cut = INT_MAX;
  if (use_topk) {
    if (threadIdx.x == 0) s.remaining = p.top_k;
    uint32_t hi_bits = 0, hi_mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      if (threadIdx.x < 256) s.hist[threadIdx.x] = 0;
      __syncthreads();
      for (int t = threadIdx.x; t < vocab; t += kThreads) {
        const float x = w[t];
        if (x == -INFINITY) continue;
        const uint32_t k = OrderKey(x);
        if ((k & hi_mask) == hi_bits) atomicAdd(&s.hist[(k >> shift) & 255u], 1);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        int rem = s.remaining, chosen = 0;
        for (int b = 255; b >= 0; --b) {
          if (s.hist[b] >= rem) {
            chosen = b;
            break;
          }
          rem -= s.hist[b];
        }
        s.remaining = rem;
        s.chosen = chosen;
      }
      __syncthreads();
      hi_bits |= static_cast<uint32_t>(s.chosen) << shift;
      hi_mask |= 255u << shift;
    }
    k_key = hi_bits;
    const int ties = s.remaining;
    k_cut = NthTie(vocab, ties, [&](int t) {
      const float x = w[t];
      return x != -INFINITY && OrderKey(x) == k_key;
    }, s);
  }
  // 5. Weights: w = exp(l - max) for candidates (double exp, rounded once), -1 otherwise.
  for (int t = threadIdx.x; t < vocab; t += kThreads) {
    const float x = w[t];
    bool cand = x != -INFINITY;
    if (cand && use_topk) {
      const uint32_t k = OrderKey(x);
      cand = k > k_key || (k == k_key && t <= k_cut);
    }
    w[t] = cand ? static_cast<float>(exp(static_cast<double>(__fsub_rn(x, m)))) : -1.0f;
  }
  __syncthreads();
  auto is_cand = [](int, float x) { return x >= 0.0f; };
  // 6. top-p over the sorted order.
  bool has_p = false;
  uint32_t p_key = 0;
  int p_id = 0;
  if (p.top_p < 1.0f) {
    float z = 0.0f;
    for (int t = threadIdx.x; t < vocab; t += kThreads) z += is_cand(t, w[t]) ? w[t] : 0.0f;
    z = BlockSumF(z, s);
    has_p = FindCrossing(w, vocab, __fmul_rn(p.top_p, z), false, is_cand, s, &p_key, &p_id);
  }
  // 7. min-p; the kept set is a prefix of the sorted order.
  const float min_p = p.min_p;
  auto kept = [&](int t, float x) {
    if (x < 0.0f) return false;
    if (has_p) {
      const uint32_t k = __float_as_uint(x);
      if (!(k > p_key || (k == p_key && t <= p_id))) return false;
    }
    return !(min_p > 0.0f && x < min_p);
  };
  // 8. The draw.
  float z = 0.0f;
  for (int t = threadIdx.x; t < vocab; t += kThreads) z += kept(t, w[t]) ? w[t] : 0.0f;
  z = BlockSumF(z, s);
  const float u = SampleUniform(p.seed, static_cast<uint32_t>(p.sample_index),
                                static_cast<uint32_t>(p.output_index));
  uint32_t key;
  int id;
  if (!FindCrossing(w, vocab, __fmul_rn(u, z), true, kept, s, &key, &id)) {
    // Rounding left no token above the target: the last kept one in sorted order.
    float lv = INFINITY;
    int li = -1;
    auto lower = [](float ov, int oi, float v, int i) { return ov < v || (ov == v && oi > i); };
    for (int t = threadIdx.x; t < vocab; t += kThreads) {
      if (kept(t, w[t]) && lower(w[t], t, lv, li)) lv = w[t], li = t;
    }
    id = BlockBest(lv, li, lower, s);
  }
  if (threadIdx.x == 0) a.tokens[r] = id;
}

}  // namespace

cudaError_t SampleTokens(const SampleArgs& args, cudaStream_t stream) {
  if (args.num_rows < 0 || args.num_rows > 65535 || args.vocab <= 0) return cudaErrorInvalidValue;
  if (args.num_rows == 0) return cudaSuccess;
  MarkHistoryKernel<<<dim3(8, args.num_rows), kMarkThreads, 0, stream>>>(args);
  SampleKernel<<<args.num_rows, kThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace weft::kernels::cuda

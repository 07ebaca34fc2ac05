// Kernels of sampling.h. One 512-thread block per row. The weights are
// sampling_math.h's integers and every sum of them is an exact uint64 sum, so no result
// depends on the order in which threads add (nor on scheduling); the logit arithmetic
// is the host's fp32 operations, one rounding each (__fdiv_rn, __fsub_rn, ...).
//
// Sorted-order prefix sums (top-p and the draw) come from a radix descent over the 32
// bits of W, 4 bits per pass from the top: each thread adds the weights of its tokens
// that match the digits chosen so far into 16 private uint64 bins in shared memory
// (bins[digit][thread], dynamic, 64 KB: no atomics, no bank conflicts beyond the two
// wavefronts of a 64-bit access), warp d then sums digit d over the threads, and thread 0
// walks the digits from 15 down. After 8 passes one weight value V is left; its tokens
// are walked in ascending id (a block-wide exclusive scan over contiguous id chunks).
#include <climits>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/sampling.h"
#include "common/sampling/sampling_math.h"

namespace weft::kernels::cuda {
namespace {

using u64 = unsigned long long;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 16;  // 4-bit digits
constexpr int kCountThreads = 256;
// Top-logprob candidates each thread keeps in TokenLogprobs' single pass.
constexpr int kLocalTop = 32;
constexpr size_t kBinBytes = sizeof(u64) * kBins * kThreads;  // dynamic shared memory
static_assert(kWarps == kBins, "warp d sums digit d");

struct Shared {
  u64 bin_total[kBins];
  u64 u64s[kWarps];
  int hist[256];
  float f32[32];
  int best_i[32];
  int chosen;
  int remaining;
  int found;
  u64 before;
};

__device__ __forceinline__ bool HasPenalties(const sampling::RowParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
         p.frequency_penalty != 0.0f;
}

// fp32 -> uint32 with the same order (any sign).
__device__ __forceinline__ uint32_t OrderKey(float x) {
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ u64 WarpSumU64(u64 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// Exact block-wide sum; every thread gets it.
__device__ u64 BlockSumU64(u64 v, Shared& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpSumU64(v);
  __syncthreads();  // s.u64s may still be read by a previous reduction
  if (lane == 0) s.u64s[warp] = v;
  __syncthreads();
  return WarpSumU64(lane < kWarps ? s.u64s[lane] : 0ull);
}

// Block-wide minimum; every thread gets it.
__device__ u64 BlockMinU64(u64 v, Shared& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(kFullMask, v, o));
  __syncthreads();
  if (lane == 0) s.u64s[warp] = v;
  __syncthreads();
  v = lane < kWarps ? s.u64s[lane] : ~0ull;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Exact exclusive prefix sum over threads in thread order.
__device__ u64 BlockExclusiveScanU64(u64 v, Shared& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  u64 incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const u64 n = __shfl_up_sync(kFullMask, incl, o);
    if (lane >= o) incl += n;
  }
  __syncthreads();
  if (lane == 31) s.u64s[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    u64 t = lane < kWarps ? s.u64s[lane] : 0ull;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const u64 n = __shfl_up_sync(kFullMask, t, o);
      if (lane >= o) t += n;
    }
    if (lane < kWarps) s.u64s[lane] = t;  // inclusive prefix of the warp totals
  }
  __syncthreads();
  return (warp > 0 ? s.u64s[warp - 1] : 0ull) + incl - v;
}

// Block-wide best (value, id) under `better`; every thread gets the winning id.
// (none_v, none_id) loses to everything (the value of threads with no candidate).
template <typename Better>
__device__ int BlockBest(float v, int id, Better better, float none_v, int none_id,
                         Shared& s) {
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
  v = lane < kWarps ? s.f32[lane] : none_v;
  id = lane < kWarps ? s.best_i[lane] : none_id;
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
  const int excl = static_cast<int>(BlockExclusiveScanU64(static_cast<u64>(mine), s));
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

// The first token in sorted order (W desc, id asc) among the tokens with pred(t, W) at
// which the running sum of W reaches `target` (kDraw: sampling::DrawReached, else
// sampling::TopPReached). W of token t is the bits of w[t]. Returns its id (and its W in
// *key_out), or -1 if even the total does not reach the target.
template <bool kDraw, typename Pred>
__device__ int FindCrossing(const float* w, int vocab, double target, Pred pred, Shared& s,
                            u64* bins, uint32_t* key_out) {
  auto reached = [target](u64 cum) {
    return kDraw ? sampling::DrawReached(cum, target) : sampling::TopPReached(cum, target);
  };
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  u64* mine = bins + threadIdx.x;  // digit d at mine[d * kThreads]
  uint32_t hi_bits = 0, hi_mask = 0;
  u64 before = 0;  // exact sum of the tokens ordered before the current bucket
  for (int shift = 28; shift >= 0; shift -= 4) {
#pragma unroll
    for (int d = 0; d < kBins; ++d) mine[d * kThreads] = 0;
    for (int t = threadIdx.x; t < vocab; t += kThreads) {
      const uint32_t k = __float_as_uint(w[t]);
      if ((k & hi_mask) != hi_bits || !pred(t, k)) continue;
      mine[((k >> shift) & 15u) * kThreads] += k;
    }
    __syncthreads();
    {
      u64 acc = 0;  // warp d sums digit d
      for (int i = lane; i < kThreads; i += 32) acc += bins[warp * kThreads + i];
      acc = WarpSumU64(acc);
      if (lane == 0) s.bin_total[warp] = acc;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      u64 run = before;
      int chosen = -1;
      for (int d = kBins - 1; d >= 0; --d) {
        const u64 next = run + s.bin_total[d];
        if (s.bin_total[d] != 0 && reached(next)) {
          chosen = d;
          break;
        }
        run = next;
      }
      s.chosen = chosen;
      s.before = run;
    }
    __syncthreads();  // also: every thread's bins were read before the next pass zeroes them
    const int chosen = s.chosen;
    if (chosen < 0) return -1;
    before = s.before;
    hi_bits |= static_cast<uint32_t>(chosen) << shift;
    hi_mask |= 15u << shift;
  }
  // The tokens of weight hi_bits, ascending id: exact prefix sums over id chunks.
  const uint32_t key = hi_bits;
  auto tie = [&](int t) {
    const uint32_t k = __float_as_uint(w[t]);
    return k == key && pred(t, k);
  };
  int b, e;
  MyChunk(vocab, &b, &e);
  u64 mine_sum = 0;
  for (int t = b; t < e; ++t) mine_sum += tie(t) ? key : 0u;
  const u64 excl = BlockExclusiveScanU64(mine_sum, s);
  if (threadIdx.x == 0) s.found = INT_MAX;
  __syncthreads();
  u64 run = before + excl;
  if (!reached(run) && reached(run + mine_sum)) {  // the crossing is in this chunk
    for (int t = b; t < e; ++t) {
      if (!tie(t)) continue;
      run += key;
      if (reached(run)) {
        atomicMin(&s.found, t);
        break;
      }
    }
  }
  __syncthreads();
  *key_out = key;
  return s.found == INT_MAX ? -1 : s.found;  // -1 cannot happen: the sums are exact
}

__global__ void __launch_bounds__(kCountThreads) ZeroCountRowsKernel(CountUpdate a) {
  int32_t* row = a.counts + int64_t{a.zero_rows[blockIdx.y]} * a.vocab;
  for (int t = blockIdx.x * kCountThreads + threadIdx.x; t < a.vocab;
       t += gridDim.x * kCountThreads) {
    row[t] = 0;
  }
}

__global__ void __launch_bounds__(kCountThreads) MarkCountsKernel(CountUpdate a) {
  const int i = blockIdx.x * kCountThreads + threadIdx.x;
  if (i >= a.num_marks) return;
  const int32_t* m = a.marks + 3 * int64_t{i};
  int32_t* c = a.counts + int64_t{m[0]} * a.vocab + m[1];
  if (m[2] != 0) atomicAdd(c, 1);
  atomicOr(c, kCountSeen);
}

// Row r's result (thread 0): the token, also added to the row's count row.
__device__ void Emit(const SampleArgs& a, int r, int count_row, int id) {
  a.tokens[r] = id;
  if (count_row >= 0 && id >= 0) {
    int32_t* c = a.counts + int64_t{count_row} * a.vocab + id;
    *c = ((*c & (kCountSeen - 1)) + 1) | kCountSeen;
  }
}

__global__ void __launch_bounds__(kThreads) SampleKernel(SampleArgs a) {
  __shared__ Shared s;
  WEFT_DYNAMIC_SMEM(u64, bins);  // [kBins][kThreads]
  const int r = blockIdx.x;
  const int vocab = a.vocab;
  const sampling::RowParams p = a.params[r];
  float* w = a.work + int64_t{r} * vocab;
  const int64_t logits_row = a.logits_rows != nullptr ? a.logits_rows[r] : r;
  const float* logits = a.logits + logits_row * a.logits_stride;
  const uint8_t* mask = a.mask_index != nullptr && a.mask_index[r] >= 0
                           ? a.masks + int64_t{a.mask_index[r]} * sampling::MaskBytes(vocab)
                           : nullptr;
  for (int t = threadIdx.x; t < vocab; t += kThreads) {
    const float x = logits[t];
    w[t] = isnan(x) || (mask != nullptr && !sampling::MaskAllows(mask, t)) ? -INFINITY : x;
  }
  __syncthreads();
  // 1. Penalties, for every token of the history (its count row).
  const int count_row = a.count_rows != nullptr ? a.count_rows[r] : -1;
  if (HasPenalties(p) && count_row >= 0) {
    const int32_t* counts = a.counts + int64_t{count_row} * vocab;
    const float rep = p.repetition_penalty;
    for (int t = threadIdx.x; t < vocab; t += kThreads) {
      const int c = counts[t];
      if (c == 0) continue;
      float x = w[t];
      if (rep != 1.0f) x = x > 0.0f ? __fdiv_rn(x, rep) : __fmul_rn(x, rep);
      const int n = c & (kCountSeen - 1);
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
    const int best = BlockBest(bv, bi, higher, -INFINITY, INT_MAX, s);
    if (threadIdx.x == 0) Emit(a, r, count_row, w[best] == -INFINITY ? -1 : best);
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
  const int num_cand = static_cast<int>(BlockSumU64(static_cast<u64>(mine), s));
  const float m = BlockMax(mx, s.f32);
  if (num_cand == 0) {
    if (threadIdx.x == 0) Emit(a, r, count_row, -1);
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
  // 5. Integer weights (0 for non-candidates; candidates with weight 0 drop out too),
  // stored as their bits in w.
  u64 z_part = 0;
  for (int t = threadIdx.x; t < vocab; t += kThreads) {
    const float x = w[t];
    bool cand = x != -INFINITY;
    if (cand && use_topk) {
      const uint32_t k = OrderKey(x);
      cand = k > k_key || (k == k_key && t <= k_cut);
    }
    const uint32_t wt = cand ? sampling::Weight(__fsub_rn(x, m)) : 0u;
    w[t] = __uint_as_float(wt);
    z_part += wt;
  }
  const u64 z = BlockSumU64(z_part, s);  // also orders the stores above before the reads below
  auto weighted = [](int, uint32_t k) { return k != 0u; };
  // 6. top-p over the sorted order.
  int p_id = -1;
  uint32_t p_key = 0;
  if (p.top_p < 1.0f) {
    p_id = FindCrossing<false>(w, vocab, sampling::TopPTarget(p.top_p, z), weighted, s, bins,
                               &p_key);
  }
  // 7. min-p; the kept set is a prefix of the sorted order.
  const bool has_p = p_id >= 0;
  const float min_p = p.min_p;
  auto kept = [=](int t, uint32_t k) {
    if (k == 0u) return false;
    if (has_p && !(k > p_key || (k == p_key && t <= p_id))) return false;
    return !(min_p > 0.0f && !sampling::MinPKeeps(k, min_p));
  };
  // 8. The draw.
  u64 kept_part = 0;
  for (int t = threadIdx.x; t < vocab; t += kThreads) {
    const uint32_t k = __float_as_uint(w[t]);
    kept_part += kept(t, k) ? k : 0u;
  }
  const u64 z_kept = BlockSumU64(kept_part, s);
  const float u = sampling::Uniform(p.seed, static_cast<uint32_t>(p.sample_index),
                                    static_cast<uint32_t>(p.output_index));
  uint32_t key;
  int id = FindCrossing<true>(w, vocab, sampling::DrawTarget(u, z_kept), kept, s, bins, &key);
  if (id < 0) {
    // Rounding left no token above the target (cannot happen for u < 1): the last kept
    // token in sorted order, i.e. the smallest weight, highest id among its ties.
    u64 least = ~0ull;  // (W << 32) | (0xffffffff - id): the minimum is the last token
    for (int t = threadIdx.x; t < vocab; t += kThreads) {
      const uint32_t k = __float_as_uint(w[t]);
      if (kept(t, k)) least = min(least, (static_cast<u64>(k) << 32) | (0xffffffffu - t));
    }
    least = BlockMinU64(least, s);
    id = least == ~0ull ? -1 : static_cast<int>(0xffffffffu - static_cast<uint32_t>(least));
  }
  if (threadIdx.x == 0) Emit(a, r, count_row, id);
}

// Block-wide double sum, every thread gets it: a tree, whose order differs from the host's
// ascending-id sum (TokenLogprobs' documented tolerance).
__device__ double BlockSumF64(double v, double* partial) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < kWarps ? partial[lane] : 0.0;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__global__ void __launch_bounds__(kThreads) LogprobKernel(LogprobArgs a) {
  __shared__ Shared s;
  __shared__ double partial[kWarps];
  const int j = blockIdx.x;
  const int vocab = a.vocab;
  const float* logits = a.logits + int64_t{a.logits_rows[j]} * a.logits_stride;
  auto raw = [logits](int t) {
    const float x = logits[t];
    return isnan(x) ? -INFINITY : x;
  };
  float mx = -INFINITY;
  for (int t = threadIdx.x; t < vocab; t += kThreads) mx = fmaxf(mx, raw(t));
  const float m = BlockMax(mx, s.f32);
  double part = 0.0;
  for (int t = threadIdx.x; t < vocab; t += kThreads) {
    part += exp(static_cast<double>(raw(t)) - static_cast<double>(m));
  }
  const double lse = static_cast<double>(m) + log(BlockSumF64(part, partial));
  const int token = a.tokens[a.token_index[j]];
  if (threadIdx.x == 0) {
    a.logprob[j] = token >= 0 ? static_cast<float>(static_cast<double>(raw(token)) - lse) : 0.0f;
  }
  // The n most likely (ties: lower id). One pass over the row: each thread keeps the best
  // min(n, kLocalTop) of its own tokens, sorted (every token of the row's top n is among
  // its thread's top n: fewer than n tokens rank above it); then n block-wide picks of the
  // best list head, whose thread moves on to its next. A row asking for more than
  // kLocalTop goes on with one pass over the row per further token, each the best token
  // ordered after the last pick.
  auto higher = [](float ov, int oi, float v, int i) { return ov > v || (ov == v && oi < i); };
  const int n = min(min(a.num_top[j], a.max_top), vocab);
  const int local_n = min(n, kLocalTop);
  float lv[kLocalTop];
  int li[kLocalTop];
  int count = 0;
  if (local_n > 0) {
    for (int t = threadIdx.x; t < vocab; t += kThreads) {
      const float x = raw(t);
      if (count == local_n && !higher(x, t, lv[count - 1], li[count - 1])) continue;
      int p = count < local_n ? count++ : local_n - 1;
      for (; p > 0 && higher(x, t, lv[p - 1], li[p - 1]); --p) lv[p] = lv[p - 1], li[p] = li[p - 1];
      lv[p] = x;
      li[p] = t;
    }
  }
  float last_v = INFINITY;
  int last_i = -1;
  auto emit = [&](int k, int best) {
    last_i = best;
    last_v = raw(best);
    if (threadIdx.x == 0) {
      a.top_ids[int64_t{j} * a.max_top + k] = best;
      a.top_logprobs[int64_t{j} * a.max_top + k] =
          static_cast<float>(static_cast<double>(last_v) - lse);
    }
  };
  int head = 0;
  for (int k = 0; k < local_n; ++k) {
    const bool has = head < count;
    const int best = BlockBest(has ? lv[head] : -INFINITY, has ? li[head] : INT_MAX, higher,
                               -INFINITY, INT_MAX, s);
    if (has && li[head] == best) ++head;
    emit(k, best);
  }
  for (int k = local_n; k < n; ++k) {
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int t = threadIdx.x; t < vocab; t += kThreads) {
      const float x = raw(t);
      if (!higher(last_v, last_i, x, t)) continue;  // already picked
      if (higher(x, t, bv, bi)) bv = x, bi = t;
    }
    emit(k, BlockBest(bv, bi, higher, -INFINITY, INT_MAX, s));
  }
}

}  // namespace

// Launch code (not part of the host emulation build).
#if !defined(WEFT_CUDA_HOST_EMULATION)

cudaError_t SampleTokens(const SampleArgs& args, cudaStream_t stream) {
  if (args.num_rows < 0 || args.num_rows > 65535 || args.vocab <= 0 ||
      args.vocab > sampling::kMaxVocab) {
    return cudaErrorInvalidValue;
  }
  if (args.num_rows == 0) return cudaSuccess;
  cudaError_t e = cudaFuncSetAttribute(SampleKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kBinBytes));
  if (e != cudaSuccess) return e;
  SampleKernel<<<args.num_rows, kThreads, kBinBytes, stream>>>(args);
  return cudaGetLastError();
}

cudaError_t UpdateCounts(const CountUpdate& args, cudaStream_t stream) {
  if (args.vocab <= 0 || args.num_zero < 0 || args.num_zero > 65535 || args.num_marks < 0) {
    return cudaErrorInvalidValue;
  }
  if (args.num_zero > 0) {
    ZeroCountRowsKernel<<<dim3(8, args.num_zero), kCountThreads, 0, stream>>>(args);
  }
  if (args.num_marks > 0) {
    MarkCountsKernel<<<(args.num_marks + kCountThreads - 1) / kCountThreads, kCountThreads, 0,
                       stream>>>(args);
  }
  return cudaGetLastError();
}

cudaError_t TokenLogprobs(const LogprobArgs& args, cudaStream_t stream) {
  if (args.num_rows < 0 || args.num_rows > 65535 || args.vocab <= 0 || args.max_top < 0) {
    return cudaErrorInvalidValue;
  }
  if (args.num_rows == 0) return cudaSuccess;
  LogprobKernel<<<args.num_rows, kThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

#endif  // !WEFT_CUDA_HOST_EMULATION

}  // namespace weft::kernels::cuda

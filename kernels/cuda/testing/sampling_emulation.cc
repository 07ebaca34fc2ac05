#include "kernels/cuda/testing/sampling_emulation.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/sampling/sampling_math.h"

namespace weft::kernels::cuda::testing {
namespace {

using u64 = unsigned long long;

constexpr int kThreads = 512;  // the kernel's block: it fixes the tie-scan chunks
constexpr int kSeen = 1 << 30;
constexpr float kInf = std::numeric_limits<float>::infinity();

uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

uint32_t OrderKey(float x) {
  const uint32_t u = Bits(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The kernel's per-thread contiguous id chunks, in thread order.
template <typename F>
void ForEachChunk(int vocab, F f) {
  const int chunk = (vocab + kThreads - 1) / kThreads;
  for (int th = 0; th < kThreads; ++th) {
    const int b = std::min(vocab, th * chunk);
    const int e = std::min(vocab, b + chunk);
    f(b, e);
  }
}

// NthTie: the n-th token (ascending id) with tie(t); the chunked scan of the kernel.
template <typename Tie>
int NthTie(int vocab, int n, Tie tie) {
  int found = INT_MAX;
  int excl = 0;
  ForEachChunk(vocab, [&](int b, int e) {
    int mine = 0;
    for (int t = b; t < e; ++t) mine += tie(t) ? 1 : 0;
    if (excl < n && n <= excl + mine) {
      int seen = excl;
      for (int t = b; t < e; ++t) {
        if (tie(t) && ++seen == n) {
          found = std::min(found, t);
          break;
        }
      }
    }
    excl += mine;
  });
  return found;
}

// FindCrossing of the kernel: radix descent over the bits of W, then the tie scan.
template <bool kDraw, typename Pred>
int FindCrossing(const std::vector<uint32_t>& w, double target, Pred pred, uint32_t* key_out) {
  auto reached = [target](u64 cum) {
    return kDraw ? sampling::DrawReached(cum, target) : sampling::TopPReached(cum, target);
  };
  const int vocab = static_cast<int>(w.size());
  uint32_t hi_bits = 0, hi_mask = 0;
  u64 before = 0;
  for (int shift = 28; shift >= 0; shift -= 4) {
    u64 bins[16] = {};
    for (int t = 0; t < vocab; ++t) {
      const uint32_t k = w[t];
      if ((k & hi_mask) != hi_bits || !pred(t, k)) continue;
      bins[(k >> shift) & 15u] += k;
    }
    u64 run = before;
    int chosen = -1;
    for (int d = 15; d >= 0; --d) {
      const u64 next = run + bins[d];
      if (bins[d] != 0 && reached(next)) {
        chosen = d;
        break;
      }
      run = next;
    }
    if (chosen < 0) return -1;
    before = run;
    hi_bits |= static_cast<uint32_t>(chosen) << shift;
    hi_mask |= 15u << shift;
  }
  const uint32_t key = hi_bits;
  auto tie = [&](int t) { return w[t] == key && pred(t, w[t]); };
  int found = INT_MAX;
  u64 excl = 0;
  ForEachChunk(vocab, [&](int b, int e) {
    u64 mine = 0;
    for (int t = b; t < e; ++t) mine += tie(t) ? key : 0u;
    u64 run = before + excl;
    if (!reached(run) && reached(run + mine)) {
      for (int t = b; t < e; ++t) {
        if (!tie(t)) continue;
        run += key;
        if (reached(run)) {
          found = std::min(found, t);
          break;
        }
      }
    }
    excl += mine;
  });
  *key_out = key;
  return found == INT_MAX ? -1 : found;
}

}  // namespace

int32_t EmulateDeviceSample(const sampling::RowParams& p, const std::vector<float>& logits,
                            const std::vector<int32_t>& history) {
  const int vocab = static_cast<int>(logits.size());
  std::vector<float> l(vocab);
  for (int t = 0; t < vocab; ++t) l[t] = std::isnan(logits[t]) ? -kInf : logits[t];
  // 1. Penalties (the count row UpdateCounts builds: seen | output occurrences, then one
  // application per distinct token).
  if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
      p.frequency_penalty != 0.0f) {
    std::vector<int> counts(vocab, 0);
    for (size_t i = 0; i < history.size(); ++i) {
      if (static_cast<int>(i) >= p.num_prompt) ++counts[history[i]];
      counts[history[i]] |= kSeen;
    }
    for (int32_t t : history) {
      const int c = counts[t];
      counts[t] = 0;
      if (c == 0) continue;
      float x = l[t];
      if (p.repetition_penalty != 1.0f) {
        x = x > 0.0f ? x / p.repetition_penalty : x * p.repetition_penalty;
      }
      const int n = c & (kSeen - 1);
      if (n > 0) {
        x = x - p.frequency_penalty * static_cast<float>(n);
        x = x - p.presence_penalty;
      }
      l[t] = x;
    }
  }
  // 2. Greedy.
  if (p.temperature == 0.0f) {
    int best = 0;
    for (int t = 1; t < vocab; ++t) {
      if (l[t] > l[best]) best = t;
    }
    return l[best] == -kInf ? -1 : best;
  }
  // 3. Temperature.
  int num_cand = 0;
  float m = -kInf;
  for (int t = 0; t < vocab; ++t) {
    l[t] = l[t] / p.temperature;
    num_cand += l[t] != -kInf ? 1 : 0;
    m = std::max(m, l[t]);
  }
  if (num_cand == 0) return -1;
  // 4. top-k: 8-bit radix select on the order key, then the n-th tie.
  const bool use_topk = p.top_k > 0 && p.top_k < num_cand;
  uint32_t k_key = 0;
  int k_cut = INT_MAX;
  if (use_topk) {
    int remaining = p.top_k;
    uint32_t hi_bits = 0, hi_mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      int hist[256] = {};
      for (int t = 0; t < vocab; ++t) {
        if (l[t] == -kInf) continue;
        const uint32_t k = OrderKey(l[t]);
        if ((k & hi_mask) == hi_bits) ++hist[(k >> shift) & 255u];
      }
      int chosen = 0;
      for (int b = 255; b >= 0; --b) {
        if (hist[b] >= remaining) {
          chosen = b;
          break;
        }
        remaining -= hist[b];
      }
      hi_bits |= static_cast<uint32_t>(chosen) << shift;
      hi_mask |= 255u << shift;
    }
    k_key = hi_bits;
    k_cut = NthTie(vocab, remaining,
                   [&](int t) { return l[t] != -kInf && OrderKey(l[t]) == k_key; });
  }
  // 5. Weights.
  std::vector<uint32_t> w(vocab);
  u64 z = 0;
  for (int t = 0; t < vocab; ++t) {
    bool cand = l[t] != -kInf;
    if (cand && use_topk) {
      const uint32_t k = OrderKey(l[t]);
      cand = k > k_key || (k == k_key && t <= k_cut);
    }
    w[t] = cand ? sampling::Weight(l[t] - m) : 0u;
    z += w[t];
  }
  // 6. top-p.
  int p_id = -1;
  uint32_t p_key = 0;
  if (p.top_p < 1.0f) {
    p_id = FindCrossing<false>(w, sampling::TopPTarget(p.top_p, z),
                               [](int, uint32_t k) { return k != 0u; }, &p_key);
  }
  // 7. min-p.
  const bool has_p = p_id >= 0;
  auto kept = [&](int t, uint32_t k) {
    if (k == 0u) return false;
    if (has_p && !(k > p_key || (k == p_key && t <= p_id))) return false;
    return !(p.min_p > 0.0f && !sampling::MinPKeeps(k, p.min_p));
  };
  // 8. The draw.
  u64 z_kept = 0;
  for (int t = 0; t < vocab; ++t) z_kept += kept(t, w[t]) ? w[t] : 0u;
  const float u = sampling::Uniform(p.seed, static_cast<uint32_t>(p.sample_index),
                                    static_cast<uint32_t>(p.output_index));
  uint32_t key;
  int id = FindCrossing<true>(w, sampling::DrawTarget(u, z_kept), kept, &key);
  if (id < 0) {
    u64 least = ~0ull;
    for (int t = 0; t < vocab; ++t) {
      if (kept(t, w[t])) least = std::min(least, (u64{w[t]} << 32) | (0xffffffffu - t));
    }
    id = least == ~0ull ? -1 : static_cast<int>(0xffffffffu - static_cast<uint32_t>(least));
  }
  return id;
}

}  // namespace weft::kernels::cuda::testing

// The kSplitV1 decode kernels of paged_attention.h (flash-decoding split-K + reduction),
// the launch entry point that dispatches to either decode kernel, and host helpers.
//
// Thread block = (KV head h, item, split). Lanes are grouped kTpg = head_dim/8 per token:
// lane li of a group holds dims [8*li, 8*li + 8) of a token's K or V row (one 16-byte
// load for fp16/bf16, 8 bytes + one scale for int8 — exactly one int8 group), so a warp
// reads 32/kTpg whole rows per instruction. Query heads of the group are processed
// kChunk (8; 4 at head_dim 256) at a time with their q slices in registers. With a
// sliding window the splits cut [lo, context), lo = max(0, context - window):
//   pass 1: scores[g][t] = (q_g . K_t) * scale for the split's tokens (shared memory)
//   pass 2: per head, m = max_t, p_t = expf(s_t - m), l = sum_t p_t (one warp per head)
//   pass 3: acc_g = sum_t p_t V_t, reduced over token groups (shuffles, then warps)
// One split: out = acc / l. Several: the split writes acc / l and m + log(l); the
// reduction kernel weights the splits by expf(lse_p - max lse).
// The kernels also run on the CPU under the host emulation (emulated_decode_attention_v1_test).
#include <algorithm>

#include "kernels/cuda/attention_common.cuh"

namespace weft::kernels::cuda {
namespace {

constexpr int kDecodeThreads = 128;
constexpr int kDecodeWarps = kDecodeThreads / 32;
constexpr int kVec = 8;
constexpr int kMaxScoreFloats = 4096;    // group_size * partition_size (16 KB)

// Query heads with q in registers at once (the reduction buffer holds kChunk x head_dim
// floats per warp: 16 KB at most, so the kernel stays under 48 KB of shared memory).
constexpr int ChunkHeads(int head_dim) { return head_dim > 128 ? 4 : 8; }

int64_t DecodeSmemBytes(int32_t group, int32_t partition, int32_t head_dim) {
  return (int64_t{group} * partition + int64_t{kDecodeWarps} * ChunkHeads(head_dim) * head_dim) *
         static_cast<int64_t>(sizeof(float));
}

template <typename KvT, int kHeadDim>
__global__ void __launch_bounds__(kDecodeThreads)
    DecodeSplitKernel(DecodeAttentionArgs a, PagedKvView kv) {
  constexpr int kTpg = kHeadDim / kVec;          // lanes per token row: 8, 16 or 32
  constexpr int kTokPerWarp = 32 / kTpg;         // 4, 2 or 1
  constexpr int kChunk = ChunkHeads(kHeadDim);
  constexpr int kGroups = kDecodeWarps * kTokPerWarp;
  WEFT_DYNAMIC_SMEM(float, smem);
  __shared__ float head_max[kMaxGroupSize];
  __shared__ float head_sum[kMaxGroupSize];

  const int h = blockIdx.x;
  const int item = blockIdx.y;
  const int split = blockIdx.z;
  const int group = a.num_heads / kv.num_kv_heads;
  const int ctx = a.context_lens[item];
  const int part = a.partition_size;
  const int64_t row = a.q_rows != nullptr ? a.q_rows[item] : item;
  const int64_t out_base = row * a.out_stride + int64_t{h} * group * kHeadDim;
  if (ctx <= 0) {  // graph padding: zeros, once
    if (split == 0) {
      for (int e = threadIdx.x; e < group * kHeadDim; e += blockDim.x) {
        StoreAct(a.out, out_base + e, 0.0f, a.out_dtype);
      }
    }
    return;
  }
  const int lo = WindowStart(ctx - 1, a.window);  // first key (0 without a window)
  const int start = lo + split * part;
  if (start >= ctx) return;
  const int n = min(part, ctx - start);
  const int num_splits = min((ctx - lo + part - 1) / part, a.max_splits);

  float* scores = smem;                                   // [group][part]
  float* red = smem + group * part;                        // [warps][kChunk][kHeadDim]
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int sub = lane / kTpg, li = lane % kTpg;
  const int d0 = li * kVec;
  const int32_t* table = a.block_tables + a.block_table_offsets[item];
  const float* qh = a.q + row * a.q_stride + int64_t{h} * group * kHeadDim;
  const int64_t row0 = int64_t{h} * kv.block_size;  // K/V row of slot 0 of this head

  for (int g0 = 0; g0 < group; g0 += kChunk) {
    const int gn = min(kChunk, group - g0);
    float q[kChunk][kVec];
#pragma unroll
    for (int g = 0; g < kChunk; ++g) {
      if (g < gn) {
        Load8(qh + (g0 + g) * kHeadDim + d0, q[g]);
      } else {
#pragma unroll
        for (int v = 0; v < kVec; ++v) q[g][v] = 0.0f;
      }
    }
    // Pass 1. The loop bound is uniform per warp (shuffles below need every lane).
    for (int t0 = warp * kTokPerWarp; t0 < n; t0 += kGroups) {
      const int t = t0 + sub;
      float k[kVec];
      if (t < n) {
        const int pos = start + t;
        const int64_t block = table[pos / kv.block_size];
        LoadKvRow8<KvT, kHeadDim>(kv.k, kv.k_scale, kv, block, row0 + pos % kv.block_size, d0,
                                  k);
      } else {
#pragma unroll
        for (int v = 0; v < kVec; ++v) k[v] = 0.0f;
      }
#pragma unroll
      for (int g = 0; g < kChunk; ++g) {
        if (g < gn) {
          float s = 0.0f;
#pragma unroll
          for (int v = 0; v < kVec; ++v) s = fmaf(q[g][v], k[v], s);
          s = GroupSum<kTpg>(s);
          if (li == 0 && t < n) scores[(g0 + g) * part + t] = s * a.scale;
        }
      }
    }
    __syncthreads();
    // Pass 2: one warp per head of the chunk.
    for (int g = warp; g < gn; g += kDecodeWarps) {
      float* sg = scores + (g0 + g) * part;
      float m = -INFINITY;
      for (int t = lane; t < n; t += 32) m = fmaxf(m, sg[t]);
      m = WarpMax(m);
      float l = 0.0f;
      for (int t = lane; t < n; t += 32) {
        const float p = expf(sg[t] - m);
        sg[t] = p;
        l += p;
      }
      l = WarpSum(l);
      if (lane == 0) {
        head_max[g] = m;
        head_sum[g] = l;
      }
    }
    __syncthreads();
    // Pass 3.
    float acc[kChunk][kVec];
#pragma unroll
    for (int g = 0; g < kChunk; ++g) {
#pragma unroll
      for (int v = 0; v < kVec; ++v) acc[g][v] = 0.0f;
    }
    for (int t = warp * kTokPerWarp + sub; t < n; t += kGroups) {
      const int pos = start + t;
      const int64_t block = table[pos / kv.block_size];
      float v8[kVec];
      LoadKvRow8<KvT, kHeadDim>(kv.v, kv.v_scale, kv, block, row0 + pos % kv.block_size, d0, v8);
#pragma unroll
      for (int g = 0; g < kChunk; ++g) {
        if (g < gn) {
          const float p = scores[(g0 + g) * part + t];
#pragma unroll
          for (int v = 0; v < kVec; ++v) acc[g][v] = fmaf(p, v8[v], acc[g][v]);
        }
      }
    }
#pragma unroll
    for (int g = 0; g < kChunk; ++g) {
      if (g < gn) {
#pragma unroll
        for (int v = 0; v < kVec; ++v) {
          float x = acc[g][v];
#pragma unroll
          for (int o = kTpg; o < 32; o <<= 1) x += __shfl_xor_sync(kFullMask, x, o);
          if (sub == 0) red[(warp * kChunk + g) * kHeadDim + d0 + v] = x;
        }
      }
    }
    __syncthreads();
    for (int e = tid; e < gn * kHeadDim; e += blockDim.x) {
      const int g = e / kHeadDim, d = e % kHeadDim;
      float sum = red[g * kHeadDim + d];
#pragma unroll
      for (int w = 1; w < kDecodeWarps; ++w) sum += red[(w * kChunk + g) * kHeadDim + d];
      const float o = sum / head_sum[g];
      const int head = h * group + g0 + g;
      if (num_splits == 1) {
        StoreAct(a.out, row * a.out_stride + int64_t{head} * kHeadDim + d, o, a.out_dtype);
      } else {
        const int64_t p = (int64_t{item} * a.num_heads + head) * a.max_splits + split;
        a.workspace[p * kHeadDim + d] = o;
        if (d == 0) {
          float* lse = a.workspace +
                       int64_t{a.num_items} * a.num_heads * a.max_splits * kHeadDim;
          lse[p] = head_max[g] + logf(head_sum[g]);
        }
      }
    }
    __syncthreads();  // scores, red and the head statistics are reused by the next chunk
  }
}

template <int kHeadDim>
__global__ void __launch_bounds__(kHeadDim) DecodeReduceKernel(DecodeAttentionArgs a) {
  const int head = blockIdx.x;
  const int item = blockIdx.y;
  const int ctx = a.context_lens[item];
  const int len = ctx - WindowStart(ctx - 1, a.window);  // keys the splits cut
  if (ctx <= 0 || len <= a.partition_size) return;  // padding, or one split wrote the output
  const int ns = min((len + a.partition_size - 1) / a.partition_size, a.max_splits);
  const int64_t base = (int64_t{item} * a.num_heads + head) * a.max_splits;
  const float* lse =
      a.workspace + int64_t{a.num_items} * a.num_heads * a.max_splits * kHeadDim + base;
  float m = -INFINITY;
  for (int p = 0; p < ns; ++p) m = fmaxf(m, lse[p]);
  const int d = threadIdx.x;
  float total = 0.0f, acc = 0.0f;
  for (int p = 0; p < ns; ++p) {
    const float w = expf(lse[p] - m);
    total += w;
    acc = fmaf(w, a.workspace[(base + p) * kHeadDim + d], acc);
  }
  const int64_t row = a.q_rows != nullptr ? a.q_rows[item] : item;
  StoreAct(a.out, row * a.out_stride + int64_t{head} * kHeadDim + d, acc / total, a.out_dtype);
}

}  // namespace

// Launch code and host helpers (not part of the host emulation build).
#if !defined(WEFT_CUDA_HOST_EMULATION)
namespace {

struct DecodeLauncher {
  const DecodeAttentionArgs& a;
  const PagedKvView& kv;
  cudaStream_t stream;
  int64_t smem;

  template <typename KvT, int kHeadDim>
  cudaError_t operator()() const {
    const dim3 grid(kv.num_kv_heads, a.num_items, a.max_splits);
    DecodeSplitKernel<KvT, kHeadDim>
        <<<grid, kDecodeThreads, static_cast<size_t>(smem), stream>>>(a, kv);
    if (a.max_splits > 1) {
      DecodeReduceKernel<kHeadDim><<<dim3(a.num_heads, a.num_items), kHeadDim, 0, stream>>>(a);
    }
    return cudaGetLastError();
  }
};

}  // namespace

int32_t ChooseDecodePartition(int32_t num_items, int32_t num_kv_heads, int32_t group_size,
                              int32_t block_size, int32_t max_context, int32_t num_sms) {
  (void)block_size;  // splits may cut blocks: tokens are addressed one by one
  int32_t part = std::min<int32_t>(512, kMaxScoreFloats / std::max(group_size, 1));
  part = std::max<int32_t>(32, part / 32 * 32);
  const int64_t blocks_per_split = int64_t{std::max(num_items, 1)} * std::max(num_kv_heads, 1);
  while (part >= 256 &&
         blocks_per_split * DecodeNumSplits(max_context, part) < int64_t{num_sms}) {
    part /= 2;
  }
  return part;
}

DecodePlan PlanDecode(DecodeKernel kernel, const DecodeShape& s) {
  DecodePlan plan;
  const int32_t ctx = std::max(s.max_context, 1);
  if (kernel == DecodeKernel::kSplitV1) {
    plan.partition_size = ChooseDecodePartition(s.num_items, s.num_kv_heads, s.group_size,
                                                s.block_size, ctx, s.num_sms);
  } else {
    const bool grouped = kernel == DecodeKernel::kGrouped;
    const int32_t kTile =
        grouped ? GroupedDecodeTileTokens(s.head_dim) : kPipelinedDecodeTileTokens;
    const int64_t pairs = int64_t{std::max(s.num_items, 1)} * std::max(s.num_kv_heads, 1);
    const int64_t slots =
        int64_t{std::max(s.num_sms, 1)} *
        (grouped ? GroupedDecodeCtasPerSm(s.dtype, s.head_dim, s.group_size)
                 : PipelinedDecodeCtasPerSm(s.dtype, s.head_dim, s.group_size));
    int32_t part = (ctx + kTile - 1) / kTile * kTile;  // one split
    for (int32_t splits = 1;; ++splits) {
      int32_t p = (ctx + splits - 1) / splits;
      p = (p + kTile - 1) / kTile * kTile;
      // Splits of >= 64 tokens (pipelined: 2 tiles, grouped: 1 or 2): the merge stays
      // cheap; past one tile per split, p stops shrinking.
      if (splits > 1 && (p < 64 || (ctx + kTile - 1) / kTile < splits)) break;
      const int64_t ctas = pairs * DecodeNumSplits(ctx, p);
      const int64_t waves = (ctas + slots - 1) / slots;
      part = p;
      if (ctas * 100 >= waves * slots * 85) break;
    }
    plan.partition_size = part;
  }
  plan.max_splits = DecodeNumSplits(ctx, plan.partition_size);
  plan.workspace_floats = DecodeWorkspaceFloats(s.num_items, s.num_kv_heads * s.group_size,
                                                s.head_dim, plan.max_splits);
  return plan;
}

cudaError_t PrepareAttentionKernels() {
  cudaError_t e = PreparePipelinedDecode();
  if (e == cudaSuccess) e = PrepareGroupedDecode();
  return e != cudaSuccess ? e : PrepareTcPrefill();
}

cudaError_t PagedDecodeAttention(const DecodeAttentionArgs& args, const PagedKvView& kv,
                                 cudaStream_t stream) {
  if (kv.num_kv_heads <= 0 || args.num_heads % kv.num_kv_heads != 0 || args.num_items < 0 ||
      args.num_items > 65535 || args.partition_size <= 0 || args.max_splits < 1 ||
      args.max_splits > 65535 || (args.max_splits > 1 && args.workspace == nullptr) ||
      (args.kernel != DecodeKernel::kSplitV1 && args.max_splits > 1 &&
       args.split_counters == nullptr) ||
      args.device_min_partition < 0 ||
      (args.kernel == DecodeKernel::kSplitV1 && args.device_min_partition > 0)) {
    return cudaErrorInvalidValue;
  }
  const int32_t group = args.num_heads / kv.num_kv_heads;
  if (group < 1 || !AttentionHeadDimSupported(kv.head_dim) ||
      group > MaxAttentionGroup(kv.head_dim) || args.window < 0) {
    return cudaErrorInvalidValue;
  }
  if (args.kernel == DecodeKernel::kPipelined) {
    if (args.num_items == 0) return cudaSuccess;
    return LaunchPipelinedDecode(args, kv, stream);
  }
  if (args.kernel == DecodeKernel::kGrouped) {
    if (args.num_items == 0) return cudaSuccess;
    return LaunchGroupedDecode(args, kv, stream);
  }
  if (args.kernel != DecodeKernel::kSplitV1 ||
      int64_t{group} * args.partition_size > kMaxScoreFloats) {
    return cudaErrorInvalidValue;
  }
  if (args.num_items == 0) return cudaSuccess;
  const int64_t smem = DecodeSmemBytes(group, args.partition_size, kv.head_dim);
  return DispatchKv(kv.dtype, kv.head_dim, DecodeLauncher{args, kv, stream, smem});
}

#endif  // !WEFT_CUDA_HOST_EMULATION

}  // namespace weft::kernels::cuda

// The prefill kernel of paged_attention.h: causal attention for many query tokens per
// sequence, variable chunk lengths in one launch, chunked-prefill aware (queries start
// at the sequence's num_computed_tokens), FlashAttention-2 style on CUDA cores.
//
// Thread block = (tile, KV head): kRows = 128 / kTpr rows, each row one (query token,
// query head of the group) owned by kTpr = head_dim/32 adjacent lanes; lane li of a row
// holds 32 dims, the float4 chunks c = li, li + kTpr, ... (conflict-free shared reads).
// Keys are visited in tiles of kKeys positions (32; 16 at head_dim 256, keeping the
// static K and V tiles under 48 KB), K and V staged in shared memory as fp32
// (dequantized once for all rows of the tile); per tile and row:
//   s_j = (q . K_j) * scale (masked to -inf past the row's position, and before its
//   window's start), m' = max(m, s_j),
//   acc = acc * expf(m - m') + sum_j expf(s_j - m') V_j,  l likewise;  out = acc / l.
// With a window the key tiles start at the tile's first row's window start.
// The kernel also runs on the CPU under the host emulation (emulated_prefill_attention_test).
#include "kernels/cuda/attention_common.cuh"

namespace weft::kernels::cuda {
namespace {

constexpr int kPrefillThreads = 128;
constexpr int kPad = 4;  // floats of padding per shared row

constexpr int KeysPerTile(int head_dim) { return head_dim > 128 ? 16 : 32; }

template <typename KvT, int kHeadDim>
__global__ void __launch_bounds__(kPrefillThreads)
    PrefillKernel(PrefillAttentionArgs a, PagedKvView kv) {
  constexpr int kTpr = kHeadDim / 32;          // lanes per row: 2, 4 or 8
  constexpr int kKeys = KeysPerTile(kHeadDim);
  constexpr int kRows = kPrefillThreads / kTpr;
  constexpr int kChunks = 32 / 4;              // float4 chunks per lane
  __shared__ __align__(16) float ks[kKeys][kHeadDim + kPad];
  __shared__ __align__(16) float vs[kKeys][kHeadDim + kPad];

  const int tile = blockIdx.x;
  const int h = blockIdx.y;
  const int group = a.num_heads / kv.num_kv_heads;
  const int tile_tokens = kRows / group;
  const int s = a.tile_seq[tile];
  const int q_begin = a.tile_q_begin[tile];
  const int q_end = min(a.seq_num_tokens[s], q_begin + tile_tokens);
  const int start_pos = a.seq_start_pos[s];
  const int32_t* table = a.block_tables + a.block_table_offsets[s];

  const int tid = threadIdx.x;
  const int r = tid / kTpr, li = tid % kTpr;
  const int tq = q_begin + r / group;
  const int head = h * group + r % group;
  const bool active = r < tile_tokens * group && tq < q_end;
  const int pos = active ? start_pos + tq : -1;  // inactive rows mask every key
  const int lo = WindowStart(pos, a.window);     // the row's first key
  const int64_t row = int64_t{a.seq_q_start[s]} + tq;

  float q[32], acc[32];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (active) {
      x = *reinterpret_cast<const float4*>(a.q + row * a.q_stride + int64_t{head} * kHeadDim +
                                           4 * (li + kTpr * c));
    }
    q[4 * c] = x.x, q[4 * c + 1] = x.y, q[4 * c + 2] = x.z, q[4 * c + 3] = x.w;
  }
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  const int num_keys = start_pos + q_end;  // keys [0, last position]
  // The first key tile holds the tile's first row's first key (uniform over the block).
  const int k_first = WindowStart(start_pos + q_begin, a.window) / kKeys * kKeys;
  const int64_t row0 = int64_t{h} * kv.block_size;
  for (int k0 = k_first; k0 < num_keys; k0 += kKeys) {
    __syncthreads();  // the previous tile has been consumed
    for (int gi = tid; gi < kKeys * (kHeadDim / 8); gi += kPrefillThreads) {
      const int j = gi / (kHeadDim / 8);
      const int d0 = (gi % (kHeadDim / 8)) * 8;
      const int kp = k0 + j;
      float kx[8], vx[8];
      if (kp < num_keys) {
        const int64_t block = table[kp / kv.block_size];
        const int64_t kv_row = row0 + kp % kv.block_size;
        LoadKvRow8<KvT, kHeadDim>(kv.k, kv.k_scale, kv, block, kv_row, d0, kx);
        LoadKvRow8<KvT, kHeadDim>(kv.v, kv.v_scale, kv, block, kv_row, d0, vx);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) kx[i] = vx[i] = 0.0f;
      }
      *reinterpret_cast<float4*>(&ks[j][d0]) = make_float4(kx[0], kx[1], kx[2], kx[3]);
      *reinterpret_cast<float4*>(&ks[j][d0 + 4]) = make_float4(kx[4], kx[5], kx[6], kx[7]);
      *reinterpret_cast<float4*>(&vs[j][d0]) = make_float4(vx[0], vx[1], vx[2], vx[3]);
      *reinterpret_cast<float4*>(&vs[j][d0 + 4]) = make_float4(vx[4], vx[5], vx[6], vx[7]);
    }
    __syncthreads();
    // Every thread runs the score loop (the row reduction shuffles need all lanes).
    float sc[kKeys];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      float p = 0.0f;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const float4 k4 = *reinterpret_cast<const float4*>(&ks[j][4 * (li + kTpr * c)]);
        p = fmaf(q[4 * c], k4.x, p);
        p = fmaf(q[4 * c + 1], k4.y, p);
        p = fmaf(q[4 * c + 2], k4.z, p);
        p = fmaf(q[4 * c + 3], k4.w, p);
      }
      p = GroupSum<kTpr>(p);
      sc[j] = k0 + j <= pos && k0 + j >= lo ? p * a.scale : -INFINITY;
      tile_max = fmaxf(tile_max, sc[j]);
    }
    const float m_new = fmaxf(m, tile_max);
    if (m_new == -INFINITY) continue;  // nothing visible yet (or an inactive row)
    const float alpha = expf(m - m_new);
    l *= alpha;
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[i] *= alpha;
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      const float p = expf(sc[j] - m_new);
      l += p;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const float4 v4 = *reinterpret_cast<const float4*>(&vs[j][4 * (li + kTpr * c)]);
        acc[4 * c] = fmaf(p, v4.x, acc[4 * c]);
        acc[4 * c + 1] = fmaf(p, v4.y, acc[4 * c + 1]);
        acc[4 * c + 2] = fmaf(p, v4.z, acc[4 * c + 2]);
        acc[4 * c + 3] = fmaf(p, v4.w, acc[4 * c + 3]);
      }
    }
    m = m_new;
  }
  if (!active) return;
  const float inv_l = 1.0f / l;
  const int64_t out_base = row * a.out_stride + int64_t{head} * kHeadDim;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      StoreAct(a.out, out_base + 4 * (li + kTpr * c) + e, acc[4 * c + e] * inv_l, a.out_dtype);
    }
  }
}

}  // namespace

// Launch code and host helpers (not part of the host emulation build).
#if !defined(WEFT_CUDA_HOST_EMULATION)
namespace {

struct PrefillLauncher {
  const PrefillAttentionArgs& a;
  const PagedKvView& kv;
  cudaStream_t stream;

  template <typename KvT, int kHeadDim>
  cudaError_t operator()() const {
    PrefillKernel<KvT, kHeadDim>
        <<<dim3(a.num_tiles, kv.num_kv_heads), kPrefillThreads, 0, stream>>>(a, kv);
    return cudaGetLastError();
  }
};

}  // namespace

int32_t PrefillTileTokens(int32_t group_size, int32_t head_dim) {
  const int32_t rows = kPrefillThreads / (head_dim / 32);
  return group_size >= rows ? 1 : rows / group_size;
}

cudaError_t PagedPrefillAttention(const PrefillAttentionArgs& args, const PagedKvView& kv,
                                  cudaStream_t stream) {
  if (kv.num_kv_heads <= 0 || kv.num_kv_heads > 65535 || args.num_heads % kv.num_kv_heads != 0 ||
      args.num_tiles < 0) {
    return cudaErrorInvalidValue;
  }
  const int32_t group = args.num_heads / kv.num_kv_heads;
  if (!AttentionHeadDimSupported(kv.head_dim) || group < 1 ||
      group > kPrefillThreads / (kv.head_dim / 32) || args.window < 0) {
    return cudaErrorInvalidValue;
  }
  if (args.num_tiles == 0) return cudaSuccess;
  return DispatchKv(kv.dtype, kv.head_dim, PrefillLauncher{args, kv, stream});
}

#endif  // !WEFT_CUDA_HOST_EMULATION

}  // namespace weft::kernels::cuda

// The tensor-core prefill kernel of paged_attention.h (PagedPrefillAttentionTc):
// FlashAttention-2 on mma.sync m16n8k16 (mma.cuh), causal, paged, chunked-prefill aware.
//
// CTA = (tile, KV head), 4 warps, 64 query rows: row r = (token q_begin + r / group, query
// head h * group + r % group), PrefillTcTileTokens(group) = 64 / group tokens per tile
// (rows past tile_tokens * group, or past the chunk, are inactive: masked, not stored).
// Warp w owns rows [16 w, 16 w + 16): its q rows live in registers as A fragments
// (q * scale * log2 e, rounded to the MMA type), its output O (16 x head_dim fp32) as C
// fragments. Keys go in tiles of kKeys = 64 rows (32 at head_dim 256, where the O
// fragments alone take 128 registers): K and V tiles are staged in shared memory as
// the MMA type (bf16 for bf16 KV; fp16 for fp16 KV and for int8 KV, dequantized on the
// way in), two buffers deep (cp.async for bf16/fp16, plain loads for int8). Per key
// tile and warp:
//   S = Q K^T       8 n-tiles of 8 keys x head_dim/16 k-steps (B from ldmatrix on K rows)
//   causal mask (key > the row's position, or before its sliding window: -inf; the key
//   tiles start at the tile's first row's window), row max over the quad (shuffles),
//   P = 2^(S - m'), l = l 2^(m - m') + rowsum P, O = O 2^(m - m') + P V
//   (P's C fragments re-packed as A fragments; V's B fragments from ldmatrix.trans).
// Finally O / l (l summed over the quad) is written as ActDtype.
// Shared memory rows are padded by 16 bytes (pitch head_dim + 8 elements), so the 8 rows
// of every ldmatrix and the cp.async stores hit distinct banks. 2 x 2 x 64 x (hd + 8)
// x 2 bytes: 68 KB for head_dim 128 (3 CTAs per SM), 36 KB for 64; 2 x 2 x 32 x 264 x 2 =
// 68 KB for 256.
// Precision: q and P are rounded to bf16 (fp16) before the tensor cores (as in
// FlashAttention); scores, softmax and accumulation are fp32. Int8 K/V are dequantized
// to fp16 (one rounding of the exact int8 x scale product).
#include <algorithm>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/mma.cuh"

namespace weft::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = kWarps * 16;
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kRows == kPrefillTcRows, "one warp per 16 rows of the tile");

template <int kHeadDim>
struct TcCfg {
  static constexpr int kKeys = kHeadDim > 128 ? 32 : 64;    // keys per tile
  static constexpr int kPitch = kHeadDim + 8;               // elements per smem row
  static constexpr int kTileElems = kKeys * kPitch;         // one K or V tile
  static constexpr int kSmemBytes = 2 * 2 * kTileElems * 2;  // 2 buffers x (K, V) x 2 B
  static constexpr int kChunksPerRow = kHeadDim / 8;        // 16-byte chunks
  static constexpr int kChunks = 2 * kKeys * kChunksPerRow;  // K and V of a tile
  static constexpr int kKSteps = kHeadDim / 16;
  static constexpr int kDimTiles = kHeadDim / 8;
};

template <typename KvT, int kHeadDim>
__global__ void __launch_bounds__(kThreads)
    PrefillTcKernel(PrefillAttentionArgs a, PagedKvView kv) {
  using C = TcCfg<kHeadDim>;
  using T = typename MmaTypeFor<KvT>::T;
  constexpr int kKeys = C::kKeys;
  WEFT_DYNAMIC_SMEM(uint8_t, smem_raw);
  T* smem = reinterpret_cast<T*>(smem_raw);  // [buf][K|V][kKeys][kPitch]

  const int tile = blockIdx.x;
  const int h = blockIdx.y;
  const int group = a.num_heads / kv.num_kv_heads;
  const int tile_tokens = kPrefillTcRows / group;
  const int s = a.tile_seq[tile];
  const int q_begin = a.tile_q_begin[tile];
  const int q_end = min(a.seq_num_tokens[s], q_begin + tile_tokens);
  const int start_pos = a.seq_start_pos[s];
  const int32_t* table = a.block_tables + a.block_table_offsets[s];
  const int num_keys = start_pos + q_end;  // keys [0, the last row's position]
  const int num_key_tiles = (num_keys + kKeys - 1) / kKeys;
  // The first key tile holds the tile's first row's first key (uniform over the CTA).
  const int first_key_tile = WindowStart(start_pos + q_begin, a.window) / kKeys;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;

  // This thread's two rows: r = 16 warp + g (+ 8).
  int pos[2], lo[2];
  bool active[2];
  int64_t out_off[2];
  uint32_t qf[C::kKSteps][4];
  {
    const float qs = a.scale * kLog2e;
    const float* qrow[2];
    for (int i = 0; i < 2; ++i) {
      const int r = 16 * warp + g + 8 * i;
      const int tq = q_begin + r / group;
      const int head = h * group + r % group;
      active[i] = r < tile_tokens * group && tq < q_end;
      pos[i] = active[i] ? start_pos + tq : -1;  // inactive rows see no key
      lo[i] = WindowStart(pos[i], a.window);
      const int64_t row = int64_t{a.seq_q_start[s]} + tq;
      qrow[i] = a.q + row * a.q_stride + int64_t{head} * kHeadDim;
      out_off[i] = row * a.out_stride + int64_t{head} * kHeadDim;
    }
#pragma unroll
    for (int kk = 0; kk < C::kKSteps; ++kk) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // columns 2t (a0, a1) and 2t + 8 (a2, a3)
        const int d = 16 * kk + 8 * half + 2 * t4;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          float x0 = 0.0f, x1 = 0.0f;
          if (active[i]) {
            const float2 v = *reinterpret_cast<const float2*>(qrow[i] + d);
            x0 = v.x * qs;
            x1 = v.y * qs;
          }
          qf[kk][2 * half + i] = PackPair<T>(x0, x1);
        }
      }
    }
  }

  // Issues (bf16/fp16: cp.async; int8: loads + dequantization + stores) key tile `kt`
  // into buffer `buf`; keys past num_keys are zeros.
  const int bs = kv.block_size;
  const int64_t row0 = int64_t{h} * bs;
  auto load_tile = [&](int kt, int buf) {
    T* kdst = smem + buf * 2 * C::kTileElems;
    T* vdst = kdst + C::kTileElems;
#pragma unroll 4
    for (int c = tid; c < C::kChunks; c += kThreads) {
      const bool is_v = c >= kKeys * C::kChunksPerRow;
      const int cc = is_v ? c - kKeys * C::kChunksPerRow : c;
      const int i = cc / C::kChunksPerRow, d0 = (cc % C::kChunksPerRow) * 8;
      const int kp = kt * kKeys + i;
      const bool valid = kp < num_keys;
      T* dst = (is_v ? vdst : kdst) + i * C::kPitch + d0;
      int64_t block = 0, kv_row = 0;
      if (valid) {
        block = table[kp / bs];
        kv_row = row0 + kp % bs;
      }
      if constexpr (sizeof(KvT) == 2) {
        const KvT* src = static_cast<const KvT*>(is_v ? kv.v : kv.k);
        CpAsync16(dst, src + (valid ? block * kv.block_stride + kv_row * kHeadDim + d0 : 0),
                  valid);
      } else {
        float x[8];
        if (valid) {
          LoadKvRow8<KvT, kHeadDim>(is_v ? kv.v : kv.k, is_v ? kv.v_scale : kv.k_scale, kv,
                                    block, kv_row, d0, x);
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e) x[e] = 0.0f;
        }
        uint4 packed;
        packed.x = PackPair<T>(x[0], x[1]);
        packed.y = PackPair<T>(x[2], x[3]);
        packed.z = PackPair<T>(x[4], x[5]);
        packed.w = PackPair<T>(x[6], x[7]);
        *reinterpret_cast<uint4*>(dst) = packed;
      }
    }
  };

  float o[C::kDimTiles][4];
#pragma unroll
  for (int j = 0; j < C::kDimTiles; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  if (first_key_tile < num_key_tiles) load_tile(first_key_tile, first_key_tile & 1);
  CpAsyncCommit();
  for (int kt = first_key_tile; kt < num_key_tiles; ++kt) {
    if (kt + 1 < num_key_tiles) load_tile(kt + 1, (kt + 1) & 1);
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();  // tile kt is in buffer kt & 1 for every thread
    const T* ks = smem + (kt & 1) * 2 * C::kTileElems;
    const T* vs = ks + C::kTileElems;
    const int k0 = kt * kKeys;

    // S = Q K^T for the warp's 16 rows x 64 keys.
    float sc[kKeys / 8][4];
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j) {
      sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < C::kKSteps; kk += 2) {
        // Matrices: keys 8j..8j+7 x dims 16kk + 8i, i = 0..3 (k-steps kk and kk + 1).
        uint32_t b[4];
        LdMatrixX4(ks + (8 * j + (lane & 7)) * C::kPitch + 16 * kk + 8 * (lane >> 3), b);
        Mma16816<T>(qf[kk], b, sc[j]);
        Mma16816<T>(qf[kk + 1], b + 2, sc[j]);
      }
    }
    // Causal mask and the online softmax (base 2).
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + 8 * j + 2 * t4 + (e & 1);
        const int i = e >> 1;
        if (key > pos[i] || key < lo[i]) sc[j][e] = -INFINITY;
        tile_max[i] = fmaxf(tile_max[i], sc[j][e]);
      }
    }
    float alpha[2], m_use[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(kFullMask, tile_max[i], 1));
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(kFullMask, tile_max[i], 2));
      const float m_new = fmaxf(m[i], tile_max[i]);
      m_use[i] = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing visible yet
      alpha[i] = exp2f(m[i] - m_use[i]);
      m[i] = m_new;
      l[i] *= alpha[i];
    }
#pragma unroll
    for (int j = 0; j < C::kDimTiles; ++j) {
      o[j][0] *= alpha[0];
      o[j][1] *= alpha[0];
      o[j][2] *= alpha[1];
      o[j][3] *= alpha[1];
    }
    // P (as A fragments, 4 k-steps of 16 keys) and the row sums.
    uint32_t pf[kKeys / 16][4];
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j) {
      const float p0 = exp2f(sc[j][0] - m_use[0]), p1 = exp2f(sc[j][1] - m_use[0]);
      const float p2 = exp2f(sc[j][2] - m_use[1]), p3 = exp2f(sc[j][3] - m_use[1]);
      l[0] += p0 + p1;
      l[1] += p2 + p3;
      pf[j >> 1][(j & 1) * 2 + 0] = PackPair<T>(p0, p1);  // rows g: a0 / a2
      pf[j >> 1][(j & 1) * 2 + 1] = PackPair<T>(p2, p3);  // rows g + 8: a1 / a3
    }
    // O += P V.
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
#pragma unroll
      for (int jj = 0; jj < C::kDimTiles; jj += 2) {
        // Matrices: keys 16kk + 8 (i & 1) x dims 8 jj + 8 (i >> 1), transposed.
        const int i = lane >> 3;
        uint32_t b[4];
        LdMatrixX4Trans(vs + (16 * kk + 8 * (i & 1) + (lane & 7)) * C::kPitch + 8 * jj +
                            8 * (i >> 1),
                        b);
        Mma16816<T>(pf[kk], b, o[jj]);
        Mma16816<T>(pf[kk], b + 2, o[jj + 1]);
      }
    }
    __syncthreads();  // buffer kt & 1 is refilled with tile kt + 2 next iteration
  }
  CpAsyncWait<0>();

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(kFullMask, l[i], 1);
    l[i] += __shfl_xor_sync(kFullMask, l[i], 2);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (!active[i]) continue;
    const float inv = 1.0f / l[i];
#pragma unroll
    for (int j = 0; j < C::kDimTiles; ++j) {
      const int64_t at = out_off[i] + 8 * j + 2 * t4;
      StoreAct(a.out, at, o[j][2 * i] * inv, a.out_dtype);
      StoreAct(a.out, at + 1, o[j][2 * i + 1] * inv, a.out_dtype);
    }
  }
}

}  // namespace

// Launch code and host helpers (not part of the host emulation build).
#if !defined(WEFT_CUDA_HOST_EMULATION)
namespace {

struct TcLauncher {
  const PrefillAttentionArgs& a;
  const PagedKvView& kv;
  cudaStream_t stream;

  template <typename KvT, int kHeadDim>
  cudaError_t operator()() const {
    auto kernel = PrefillTcKernel<KvT, kHeadDim>;
    const int smem = TcCfg<kHeadDim>::kSmemBytes;
    const cudaError_t e = SetSmemLimitOutsideCapture(kernel, smem, stream);
    if (e != cudaSuccess) return e;
    kernel<<<dim3(a.num_tiles, kv.num_kv_heads), kThreads, smem, stream>>>(a, kv);
    return cudaGetLastError();
  }
};

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// DispatchKv functor: raises one instance's shared memory limit.
struct TcPrepare {
  template <typename KvT, int kHeadDim>
  cudaError_t operator()() const {
    return cudaFuncSetAttribute(PrefillTcKernel<KvT, kHeadDim>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                TcCfg<kHeadDim>::kSmemBytes);
  }
};

}  // namespace

cudaError_t PrepareTcPrefill() {
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kBf16, KvDtype::kInt8}) {
    for (int32_t hd : {64, 128, 256}) {
      const cudaError_t e = DispatchKv(dt, hd, TcPrepare{});
      if (e != cudaSuccess) return e;
    }
  }
  return cudaSuccess;
}

int32_t PrefillTcTileTokens(int32_t group_size) {
  return std::max<int32_t>(1, kPrefillTcRows / std::max<int32_t>(group_size, 1));
}

cudaError_t PagedPrefillAttentionTc(const PrefillAttentionArgs& args, const PagedKvView& kv,
                                    cudaStream_t stream) {
  if (kv.num_kv_heads <= 0 || kv.num_kv_heads > 65535 || args.num_heads % kv.num_kv_heads != 0 ||
      args.num_tiles < 0 || args.q_stride % 2 != 0) {
    return cudaErrorInvalidValue;
  }
  const int32_t group = args.num_heads / kv.num_kv_heads;
  if (!AttentionHeadDimSupported(kv.head_dim) || group < 1 || group > kPrefillTcRows ||
      args.window < 0) {
    return cudaErrorInvalidValue;
  }
  if (kv.dtype != KvDtype::kInt8 &&
      (!Aligned16(kv.k) || !Aligned16(kv.v) || (kv.block_stride * 2) % 16 != 0)) {
    return cudaErrorInvalidValue;
  }
  if (args.num_tiles == 0) return cudaSuccess;
  return DispatchKv(kv.dtype, kv.head_dim, TcLauncher{args, kv, stream});
}

#endif  // !WEFT_CUDA_HOST_EMULATION

}  // namespace weft::kernels::cuda

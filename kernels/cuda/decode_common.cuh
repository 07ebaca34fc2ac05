// Device pieces shared by the split decode kernels (kPipelined in
// decode_attention_pipelined.cu, kGrouped in decode_attention_grouped.cu), so that the
// contract of paged_attention.h's decode section lives in one place:
//   * Int8x8ToFloat / LoadChunk: 8 K/V elements of a shared-memory row as floats;
//   * DecodeSplitOf: the keys [start, start + n) of split `split` of an item — the window
//     start, the split length (partition_size, or derived on the device from the item's
//     own context when args.device_min_partition > 0), the number of splits that have
//     keys, and the zero output of graph padding (context <= 0);
//   * DecodeTileSource::Load: one stage of kTile K/V rows (+ int8 scale rows) copied into
//     shared memory by 16-byte cp.async, rows past the split zero-filled;
//   * FinishDecodeSplits: after every split CTA has written its normalized partial output
//     and log-sum-exp, the last CTA of each (item, KV head) to count combines them and
//     resets its counter;
//   * DecodeOperandsAligned (host): the 16-byte alignment both kernels' launchers check.
// Included only by .cu files. Thread-safety: functions without state.
#ifndef WEFT_KERNELS_CUDA_DECODE_COMMON_CUH_
#define WEFT_KERNELS_CUDA_DECODE_COMMON_CUH_

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/attention_common.cuh"

namespace weft::kernels::cuda {

constexpr float kDecodeLog2e = 1.4426950408889634f;
constexpr float kDecodeLn2 = 0.6931471805599453f;

// Eight int8 values (8 bytes) -> exact floats: byte b becomes the float 2^23 + (b ^ 0x80)
// by a byte permute, minus 2^23 + 128 (one PRMT + one FADD instead of a slow I2F).
__device__ __forceinline__ void Int8x8ToFloat(uint2 raw, float* f) {
  const uint32_t lo = raw.x ^ 0x80808080u, hi = raw.y ^ 0x80808080u;
  constexpr float kBias = 8388736.0f;  // 2^23 + 128
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[i] = __uint_as_float(__byte_perm(lo, 0x4B000000u, 0x7540 + i)) - kBias;
    f[4 + i] = __uint_as_float(__byte_perm(hi, 0x4B000000u, 0x7540 + i)) - kBias;
  }
}

// Eight int8 values times their fp16 scale as eight fp16 (four packed pairs, element 0 in
// the low half): each the exact product rounded once to fp16 — the bits of Int8x8ToFloat,
// an fp32 multiply (exact: 8 x 11 significant bits) and one round to fp16 — in half2
// arithmetic: the byte b ^ 0x80 under the fp16 exponent of 1024 is 1024 + (x + 128)
// (fp16's spacing there is 1), minus 1152 is x exactly, and __hmul2 rounds the exact
// product once. 4 PRMT + 4 HSUB2 + 4 HMUL2 for 8 values, where the fp32 route takes
// 8 PRMT + 8 FADD + 8 FMUL + 4 F2F pack.
__device__ __forceinline__ uint4 Int8x8ScaledToHalf(uint2 raw, uint16_t scale_bits) {
  const uint32_t lo = raw.x ^ 0x80808080u, hi = raw.y ^ 0x80808080u;
  const __half2 bias = __halves2half2(__ushort_as_half(0x6480), __ushort_as_half(0x6480));
  const __half s = __ushort_as_half(scale_bits);
  const __half2 sc = __halves2half2(s, s);
  uint32_t out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // Bytes 2 (i & 1) and 2 (i & 1) + 1 of lo (i < 2) or hi, each under 0x64.
    const uint32_t bits = __byte_perm(i < 2 ? lo : hi, 0x64646464u, (i & 1) ? 0x4342 : 0x4140);
    const __half2 v = __hmul2(__hsub2(*reinterpret_cast<const __half2*>(&bits), bias), sc);
    out[i] = *reinterpret_cast<const uint32_t*>(&v);
  }
  return uint4{out[0], out[1], out[2], out[3]};
}

// The 8 values of a shared-memory row chunk as floats (int8: unscaled).
template <typename KvT>
__device__ __forceinline__ void LoadChunk(const uint8_t* p, float* f) {
  if constexpr (sizeof(KvT) == 1) {
    Int8x8ToFloat(*reinterpret_cast<const uint2*>(p), f);
  } else {
    Load8(reinterpret_cast<const KvT*>(p), f);
  }
}

// One split of one item, as the split CTA sees it.
struct DecodeSplit {
  int64_t row = 0;     // q / out row
  int start = 0;       // first key of the split
  int n = 0;           // keys in the split (>= 1)
  int num_splits = 1;  // splits of this item that have keys
};

// The split length of an item whose keys are [lo, ctx): partition_size, or with
// device_min_partition > 0 max(device_min_partition, ceil((ctx - lo) / max_splits))
// rounded up to kTileUnit tokens, so every split the grid has takes a share of the
// item's real keys (then ceil((ctx - lo) / part) <= max_splits).
template <int kTileUnit>
__device__ __forceinline__ int DecodePartition(const DecodeAttentionArgs& a, int span) {
  if (a.device_min_partition <= 0) return a.partition_size;
  int part = (span + a.max_splits - 1) / a.max_splits;
  part = max(part, a.device_min_partition);
  return (part + kTileUnit - 1) / kTileUnit * kTileUnit;
}

// False when this CTA has nothing to do: graph padding (split 0 writes the zeros of the
// KV head's group, every thread `tid` of `threads` taking a share) or a split past the
// item's keys. Uniform over the CTA.
template <int kHeadDim, int kTileUnit>
__device__ __forceinline__ bool DecodeSplitOf(const DecodeAttentionArgs& a, int group, int h,
                                              int item, int split, int tid, int threads,
                                              DecodeSplit* s) {
  const int ctx = a.context_lens[item];
  s->row = a.q_rows != nullptr ? a.q_rows[item] : item;
  if (ctx <= 0) {  // graph padding: zeros, once
    if (split == 0) {
      const int64_t base = s->row * a.out_stride + int64_t{h} * group * kHeadDim;
      for (int e = tid; e < group * kHeadDim; e += threads) {
        StoreAct(a.out, base + e, 0.0f, a.out_dtype);
      }
    }
    return false;
  }
  const int lo = WindowStart(ctx - 1, a.window);  // first key (0 without a window)
  const int part = DecodePartition<kTileUnit>(a, ctx - lo);
  s->start = lo + split * part;
  if (s->start >= ctx) return false;
  s->n = min(part, ctx - s->start);
  s->num_splits = min((ctx - lo + part - 1) / part, a.max_splits);
  return true;
}

// Where split partials live in the workspace (decode_attention.cu's layout): partial
// outputs [item][head][split][head_dim], then log-sum-exps [item][head][split].
__device__ __forceinline__ int64_t DecodePartialIndex(const DecodeAttentionArgs& a, int item,
                                                      int head, int split) {
  return (int64_t{item} * a.num_heads + head) * a.max_splits + split;
}
__device__ __forceinline__ float* DecodeLse(const DecodeAttentionArgs& a, int head_dim) {
  return a.workspace + int64_t{a.num_items} * a.num_heads * a.max_splits * head_dim;
}

// The K/V rows of one (item, KV head) in the paged pool, and their copy into a shared
// memory stage laid out as [K rows: kTile x kPitch bytes][V rows: likewise][K scale rows:
// kTile x scale-row bytes][V scale rows] (scale rows only for int8). kPitch >= the row
// bytes, a multiple of 16 (padding rows spreads ldmatrix rows over the banks).
template <typename KvT, int kHeadDim, int kTile, int kPitch>
struct DecodeTileSource {
  static constexpr bool kInt8 = sizeof(KvT) == 1;
  static constexpr int kRowBytes = kHeadDim * static_cast<int>(sizeof(KvT));
  static constexpr int kRowChunks = kRowBytes / 16;
  static constexpr int kScaleRowBytes = kInt8 ? kHeadDim / kKvInt8Group * 2 : 0;
  static constexpr int kScaleChunks = kScaleRowBytes / 16;
  static constexpr int kDataChunks = kTile * kRowChunks;  // per K or V
  static constexpr int kScaleTileChunks = kTile * kScaleChunks;
  static constexpr int kChunks = 2 * kDataChunks + 2 * kScaleTileChunks;
  static constexpr int kDataBytes = kTile * kPitch;    // per K or V
  static constexpr int kScaleOffset = 2 * kDataBytes;  // K scales, then V scales
  static constexpr int kStageBytes = kScaleOffset + 2 * kTile * kScaleRowBytes;
  static_assert(kRowBytes % 16 == 0 && kScaleRowBytes % 16 == 0, "16-byte rows");
  static_assert(kPitch % 16 == 0 && kPitch >= kRowBytes, "16-byte aligned rows");

  const int32_t* table;
  const uint8_t* k_base;
  const uint8_t* v_base;
  const uint8_t* ks_base;
  const uint8_t* vs_base;
  int64_t block_bytes, scale_block_bytes, row0;
  int bs, bs_shift;
  bool bs_pow2;
  int start, n;  // the split's keys

  __device__ __forceinline__ DecodeTileSource(const DecodeAttentionArgs& a, const PagedKvView& kv,
                                              int h, int item, int split_start, int split_n)
      : table(a.block_tables + a.block_table_offsets[item]),
        k_base(static_cast<const uint8_t*>(kv.k)),
        v_base(static_cast<const uint8_t*>(kv.v)),
        ks_base(reinterpret_cast<const uint8_t*>(kv.k_scale)),
        vs_base(reinterpret_cast<const uint8_t*>(kv.v_scale)),
        block_bytes(kv.block_stride * static_cast<int64_t>(sizeof(KvT))),
        scale_block_bytes(kv.scale_block_stride * 2),
        row0(int64_t{h} * kv.block_size),
        bs(kv.block_size),
        bs_shift(0),
        bs_pow2((kv.block_size & (kv.block_size - 1)) == 0),
        start(split_start),
        n(split_n) {
    while ((1 << bs_shift) < bs) ++bs_shift;  // log2 of a power-of-two block size
  }

  // Issues the copies of the split's tile `t` into stage `st` by the `kThreads` threads
  // (this one is `tid`); rows past the split become zeros. The caller commits.
  template <int kThreads>
  __device__ __forceinline__ void Load(uint8_t* st, int t, int tid) const {
    const int tile_start = t * kTile;
#pragma unroll
    for (int k = 0; k < (kChunks + kThreads - 1) / kThreads; ++k) {
      const int c = tid + k * kThreads;
      if (c >= kChunks) break;
      int which, r, col;  // which: 0 K, 1 V, 2 K scales, 3 V scales
      if constexpr (kInt8) {
        if (c < 2 * kDataChunks) {
          which = c / kDataChunks;
          r = (c % kDataChunks) / kRowChunks;
          col = c % kRowChunks;
        } else {
          const int c2 = c - 2 * kDataChunks;
          which = 2 + c2 / kScaleTileChunks;
          r = (c2 % kScaleTileChunks) / kScaleChunks;
          col = c2 % kScaleChunks;
        }
      } else {
        which = c / kDataChunks;
        r = (c % kDataChunks) / kRowChunks;
        col = c % kRowChunks;
      }
      const bool valid = tile_start + r < n;
      const void* src = k_base;
      if (valid) {
        const int pos = start + tile_start + r;
        const int bi = bs_pow2 ? pos >> bs_shift : pos / bs;
        const int slot = bs_pow2 ? pos & (bs - 1) : pos - bi * bs;
        const int64_t block = __ldg(table + bi);
        const int64_t kv_row = row0 + slot;
        if (which < 2) {
          src =
              (which == 0 ? k_base : v_base) + block * block_bytes + kv_row * kRowBytes + col * 16;
        } else {
          src = (which == 2 ? ks_base : vs_base) + block * scale_block_bytes +
                kv_row * kScaleRowBytes + col * 16;
        }
      }
      uint8_t* dst = which < 2 ? st + which * kDataBytes + r * kPitch + col * 16
                               : st + kScaleOffset + (which - 2) * kTile * kScaleRowBytes +
                                     r * kScaleRowBytes + col * 16;
      CpAsync16(dst, src, valid);
    }
  }
};

// Called by every thread of a split CTA after it wrote its share of the split's partials
// (DecodePartialIndex, DecodeLse): the last CTA of (item, KV head h) to count combines the
// splits of the group's heads (weights exp(lse_p - max lse)) into the output and resets
// the counter to zero. `is_last` is a __shared__ int of the kernel. Contains
// __syncthreads (uniform: every thread of the CTA calls it).
template <int kHeadDim>
__device__ __forceinline__ void FinishDecodeSplits(const DecodeAttentionArgs& a,
                                                   const PagedKvView& kv, int group, int h,
                                                   int item, const DecodeSplit& s, int tid,
                                                   int threads, int* is_last) {
  __threadfence();  // this thread's partials are visible device-wide before the count
  __syncthreads();
  if (tid == 0) {
    int* counter = a.split_counters + int64_t{item} * kv.num_kv_heads + h;
    const int done = atomicAdd(counter, 1) + 1;
    *is_last = done == s.num_splits;
    if (*is_last) atomicExch(counter, 0);  // every split has counted: reset for the next launch
  }
  __syncthreads();
  if (!*is_last) return;
  __threadfence();
  const float* lse = DecodeLse(a, kHeadDim);
  for (int e = tid; e < group * kHeadDim; e += threads) {
    const int g = e / kHeadDim, dim = e % kHeadDim;
    const int hd = h * group + g;
    const int64_t base = DecodePartialIndex(a, item, hd, 0);
    float big = -INFINITY;
    for (int p = 0; p < s.num_splits; ++p) big = fmaxf(big, __ldcg(lse + base + p));
    float total = 0.0f, acc = 0.0f;
    for (int p = 0; p < s.num_splits; ++p) {
      const float w = expf(__ldcg(lse + base + p) - big);
      total += w;
      acc = fmaf(w, __ldcg(a.workspace + (base + p) * kHeadDim + dim), acc);
    }
    StoreAct(a.out, s.row * a.out_stride + int64_t{hd} * kHeadDim + dim, acc / total, a.out_dtype);
  }
}

// The launch precondition of the split kernels' cp.async rows (host side): K/V (and int8
// scale) bases 16-byte aligned with block strides of whole 16-byte chunks, q 16-byte
// aligned with a row stride of a multiple of 4 elements.
inline bool DecodeOperandsAligned(const DecodeAttentionArgs& args, const PagedKvView& kv) {
  auto aligned16 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  const bool int8 = kv.dtype == KvDtype::kInt8;
  return aligned16(kv.k) && aligned16(kv.v) &&
         (kv.block_stride * KvElementBytes(kv.dtype)) % 16 == 0 &&
         (!int8 || (aligned16(kv.k_scale) && aligned16(kv.v_scale) &&
                    (kv.scale_block_stride * 2) % 16 == 0)) &&
         args.q_stride % 4 == 0 && aligned16(args.q);
}

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_DECODE_COMMON_CUH_

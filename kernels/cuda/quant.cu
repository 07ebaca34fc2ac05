// Kernels of quant.h.
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/quant.h"
#include "kernels/cuda/kv_store.cuh"
#include "kernels/cuda/quant_blocks.cuh"
#if !defined(WEFT_CUDA_HOST_EMULATION)
#include "kernels/cuda/launch.cuh"
#endif

namespace weft::kernels::cuda {
namespace {

constexpr int kDequantThreads = 256;
constexpr int kGemvWarps = 8;

// The 32 weights of block `b` of a GGUF row, exactly (the arithmetic of DequantizeRow:
// products of an fp16 scale and a small integer are exact in fp32; Q4_1, Q5_1, Q4_K and
// Q5_K round the sum with their min once).
template <WeightType kType>
__device__ __forceinline__ void DequantBlock(const uint8_t* row, int64_t b, float* w) {
  if constexpr (IsRawGemvType(kType)) {
    float q[kQK], dlo, dhi, mn;
    RawBlock<kType>(row, b, q, &dlo, &dhi, &mn);
    constexpr bool kHasMin = HasMin<kType>();
#pragma unroll
    for (int i = 0; i < kQK; ++i) {
      const float prod = __fmul_rn(i < kQK / 2 ? dlo : dhi, q[i]);
      w[i] = kHasMin ? __fadd_rn(prod, mn) : prod;  // x - y is x + (-y), bit for bit
    }
  } else if constexpr (kType == WeightType::kF32) {
    const float* p = reinterpret_cast<const float*>(row) + b * kQK;
#pragma unroll
    for (int i = 0; i < kQK; ++i) w[i] = p[i];
  } else if constexpr (kType == WeightType::kF16 || kType == WeightType::kBF16) {
    const uint8_t* p = row + b * kQK * 2;
#pragma unroll
    for (int i = 0; i < kQK; ++i) {
      const uint16_t bits = LoadU16(p + 2 * i);
      w[i] = kType == WeightType::kF16 ? HalfBitsToFloat(bits)
                                       : __uint_as_float(static_cast<uint32_t>(bits) << 16);
    }
  } else if constexpr (kType == WeightType::kQ8_0) {
    const uint8_t* p = row + b * 34;
    const float d = HalfBitsToFloat(LoadU16(p));
#pragma unroll
    for (int i = 0; i < kQK; ++i) w[i] = __fmul_rn(d, static_cast<float>(static_cast<int8_t>(p[2 + i])));
  } else {
    constexpr bool kQ41 = kType == WeightType::kQ4_1;
    const uint8_t* p = row + b * (kQ41 ? 20 : 18);
    const float d = HalfBitsToFloat(LoadU16(p));
    const float mn = kQ41 ? HalfBitsToFloat(LoadU16(p + 2)) : 0.0f;
    const uint8_t* qs = p + (kQ41 ? 4 : 2);
#pragma unroll
    for (int i = 0; i < kQK / 2; ++i) {
      const int lo = qs[i] & 0x0f, hi = qs[i] >> 4;
      if (kQ41) {
        w[i] = __fadd_rn(__fmul_rn(d, static_cast<float>(lo)), mn);
        w[i + 16] = __fadd_rn(__fmul_rn(d, static_cast<float>(hi)), mn);
      } else {
        w[i] = __fmul_rn(d, static_cast<float>(lo - 8));
        w[i + 16] = __fmul_rn(d, static_cast<float>(hi - 8));
      }
    }
  }
}

template <WeightType kType, typename OutT>
__global__ void __launch_bounds__(kDequantThreads)
    DequantKernel(const uint8_t* __restrict__ src, int64_t src_row_stride, int64_t n, int64_t k,
                  OutT* __restrict__ dst) {
  const int64_t blocks_per_row = k / kQK;
  const int64_t total = n * blocks_per_row;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = i / blocks_per_row, b = i % blocks_per_row;
    float w[kQK];
    DequantBlock<kType>(src + j * src_row_stride, b, w);
    __align__(16) OutT out[kQK];
#pragma unroll
    for (int e = 0; e < kQK; ++e) out[e] = FromFloat<OutT>(w[e]);
    uint4* to = reinterpret_cast<uint4*>(dst + j * k + b * kQK);
#pragma unroll
    for (int e = 0; e < kQK * 2 / 16; ++e) to[e] = reinterpret_cast<const uint4*>(out)[e];
  }
}

// x[c0 .. c0+32) of one bf16 row as fp32.
__device__ __forceinline__ void LoadX32(const __nv_bfloat16* x, float* out) {
#pragma unroll
  for (int i = 0; i < 4; ++i) Load8(x + 8 * i, out + 8 * i);
}

// acc += x . (d q + mn) for one block: d sum(x q) + mn sum(x) (the GEMV's per-output
// arithmetic; every caller accumulates in the same order, so the same bits). Q6_K's
// halves have their own scales: dlo sum_{e<16}(x q) + dhi sum_{e>=16}(x q).
template <WeightType kType>
__device__ __forceinline__ void GemvAccumulate(const float* xv, const float* q, float dlo,
                                               float dhi, float mn, float* acc) {
  constexpr bool kHasMin = HasMin<kType>();
  if constexpr (kType == WeightType::kQ6_K) {
    float lo = 0.0f, hi = 0.0f;
#pragma unroll
    for (int e = 0; e < kQK / 2; ++e) {
      lo = fmaf(xv[e], q[e], lo);
      hi = fmaf(xv[e + 16], q[e + 16], hi);
    }
    *acc = fmaf(dlo, lo, *acc);
    *acc = fmaf(dhi, hi, *acc);
    return;
  }
  float dot = 0.0f, xsum = 0.0f;
#pragma unroll
  for (int e = 0; e < kQK; ++e) {
    dot = fmaf(xv[e], q[e], dot);
    if (kHasMin) xsum += xv[e];
  }
  *acc = fmaf(dlo, dot, *acc);
  if (kHasMin) *acc = fmaf(mn, xsum, *acc);
}

// QuantGemvRopeKv's epilogue (GemvKernel below): every warp of the block is active (its
// caller checked n % 8 == 0) and holds acc[r] of its output.
template <typename KvT>
__device__ __forceinline__ void RopeKvEpilogue(const float* acc, int32_t m, float* y,
                                               int64_t ldy, const RopeKvArgs& rope,
                                               const PagedKvView& kv) {
  __shared__ float raw[kMaxGemvRows][kGemvWarps];
  __shared__ float rot[kMaxGemvRows][kGemvWarps];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < kMaxGemvRows; ++r) {
    if (r < m) {
      const float s = WarpSum(acc[r]);
      if (lane == 0) raw[r][warp] = s;
    }
  }
  __syncthreads();
  const int hd = kv.head_dim;
  const int64_t c0 = int64_t{blockIdx.x} * kGemvWarps;  // the chunk's first output
  const int64_t q_width = int64_t{rope.num_heads} * hd;
  const int64_t kv_width = int64_t{kv.num_kv_heads} * hd;
  const bool is_q = c0 < q_width, is_k = !is_q && c0 < q_width + kv_width;
  const int d0 = static_cast<int>(c0 % hd);  // q, k and v widths are multiples of hd
  const int t = threadIdx.x;
  if (t < 4 * m) {
    const int r = t >> 2, p = t & 3;
    const int d = d0 + 2 * p;
    const float x0 = raw[r][2 * p], x1 = raw[r][2 * p + 1];
    float r0 = x0, r1 = x1;
    if (!is_q && !is_k) {
      // v: stored as computed
    } else if (d < rope.rot_dim) {
      float c, s;
      RopeCosSin(rope.positions[r], rope.inv_freq[d >> 1], &c, &s);
      r0 = RopeFirst(x0, x1, c, s);
      r1 = RopeSecond(x0, x1, c, s);
    }
    rot[r][2 * p] = r0;
    rot[r][2 * p + 1] = r1;
    float* out = y + r * ldy + c0 + 2 * p;
    out[0] = is_q ? r0 : x0;  // the QKV buffer keeps k unrotated (as RopeKvKernel leaves it)
    out[1] = is_q ? r1 : x1;
  }
  __syncthreads();
  if (is_q || t >= m) return;
  const int64_t slot_id = rope.slot_mapping[t];
  if (slot_id < 0) return;  // padding
  const int h = static_cast<int>((c0 - q_width - (is_k ? 0 : kv_width)) / hd);
  const KvGroupAt at = KvGroupIndex(kv, slot_id, h, d0 / kKvInt8Group);
  StoreGroup(static_cast<KvT*>(is_k ? kv.k : kv.v) + at.data,
             (is_k ? kv.k_scale : kv.v_scale) + at.scale, is_k ? rot[t] : raw[t]);
}

// One warp per output j (kSwiGlu: per output j < n/2, the pair of rows j and n/2 + j).
// kNorm: x is RmsNorm(norm.x) (GemvNorm, quant.h), made by every block in its prologue:
// each of the m rows' factor as RmsNormKernel computes it (RmsNormRowFactor on a block of
// the same size), the bf16 rows into dynamic shared memory (m * k bf16), then the GEMV
// reads them there; the same bits as RmsNorm into a bf16 buffer followed by the GEMV.
// KvT set (the QKV projection, QuantGemvRopeKv): the RoPE + paged KV write of
// RopeKvKernel (rope_kv.cu) as the epilogue. A block's 8 outputs are one 8-dim chunk of
// one q, k or v head (head_dim % 8 == 0, kGemvWarps == kKvInt8Group); per row, threads
// 4 r + p rotate pair p of the chunk (adjacent pairing only: both members are in the
// chunk) with RopeKvKernel's cos/sin and expressions, write the row's q rotated and k, v
// as computed to y (what the GEMV and then RopeKvKernel leave there), and thread r
// stores a k or v chunk into the cache with StoreGroup (kv_store.cuh) — the same bits.
template <WeightType kType, bool kSwiGlu, bool kNorm, typename KvT = void>
__global__ void __launch_bounds__(kGemvWarps * 32)
    GemvKernel(GemvWeights w, const __nv_bfloat16* __restrict__ x, int64_t ldx, GemvNorm norm,
               int32_t m, float* __restrict__ y, int64_t ldy, bool accumulate,
               __nv_bfloat16* __restrict__ act, int64_t ld_act, RopeKvArgs rope,
               PagedKvView kv) {
  constexpr bool kRopeKv = !std::is_void_v<KvT>;
  static_assert(!(kRopeKv && kSwiGlu), "one epilogue");
  static_assert(kGemvWarps == kKvInt8Group, "a block's outputs are one KV group");
  const int64_t outputs = kSwiGlu ? w.n / 2 : w.n;
  const int64_t j = int64_t{blockIdx.x} * kGemvWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  const int64_t blocks = w.k / kQK;
  const bool active = j < outputs;
  // The weights are constant: the lane's first block is loaded before PdlBegin, so that
  // under programmatic launch its latency overlaps the previous kernel.
  float q[kQK], d = 0.0f, dh = 0.0f, mn = 0.0f;
  float qu[kSwiGlu ? kQK : 1], du = 0.0f, duh = 0.0f, mnu = 0.0f;
  if (active && lane < blocks) {
    LoadGemvBlock<kType>(w, j, lane, q, &d, &dh, &mn);
    if constexpr (kSwiGlu) LoadGemvBlock<kType>(w, outputs + j, lane, qu, &du, &duh, &mnu);
  }
  PdlBegin();
  if constexpr (kNorm) {
    static_assert(kGemvWarps * 32 == kRmsNormThreads, "the norm's sum needs RmsNorm's block");
    WEFT_DYNAMIC_SMEM(__nv_bfloat16, xs);
    __shared__ float scratch[32];
    for (int r = 0; r < m; ++r) {
      const float* row = norm.x + r * norm.ldx;
      const float inv = RmsNormRowFactor(row, w.k, norm.eps, scratch);
      for (int64_t c = threadIdx.x; c < w.k; c += blockDim.x) {
        xs[r * w.k + c] = __float2bfloat16_rn(__fmul_rn(__fmul_rn(row[c], inv), norm.weight[c]));
      }
    }
    __syncthreads();
    x = xs;
    ldx = w.k;
  }
  if (!active) return;  // after the prologue's barriers
  float acc[kMaxGemvRows] = {0.0f, 0.0f, 0.0f, 0.0f};
  float acc_up[kMaxGemvRows] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t b = lane; b < blocks; b += 32) {
    if (b != lane) {  // the first block was loaded above
      LoadGemvBlock<kType>(w, j, b, q, &d, &dh, &mn);
      if constexpr (kSwiGlu) LoadGemvBlock<kType>(w, outputs + j, b, qu, &du, &duh, &mnu);
    }
#pragma unroll
    for (int r = 0; r < kMaxGemvRows; ++r) {
      if (r < m) {
        float xv[kQK];
        LoadX32(x + r * ldx + b * kQK, xv);
        GemvAccumulate<kType>(xv, q, d, dh, mn, &acc[r]);
        if constexpr (kSwiGlu) GemvAccumulate<kType>(xv, qu, du, duh, mnu, &acc_up[r]);
      }
    }
  }
  if constexpr (kRopeKv) {
    RopeKvEpilogue<KvT>(acc, m, y, ldy, rope, kv);
  } else {
#pragma unroll
    for (int r = 0; r < kMaxGemvRows; ++r) {
      if (r < m) {
        const float s = WarpSum(acc[r]);
        if constexpr (kSwiGlu) {
          const float u = WarpSum(acc_up[r]);
          // SwiGlu (elementwise.h): silu(g) * u = g / (1 + expf(-g)) * u, rounded as there.
          if (lane == 0) {
            act[r * ld_act + j] =
                __float2bfloat16_rn(__fmul_rn(__fdiv_rn(s, __fadd_rn(1.0f, expf(-s))), u));
          }
        } else if (lane == 0) {
          float* out = y + r * ldy + j;
          *out = accumulate ? *out + s : s;
        }
      }
    }
  }
}

}  // namespace

// Launch code (not part of the host emulation build).
#if !defined(WEFT_CUDA_HOST_EMULATION)
namespace {

template <WeightType kType, typename OutT>
cudaError_t LaunchDequant(const void* src, int64_t stride, int64_t n, int64_t k, void* dst,
                          cudaStream_t stream) {
  const int64_t total = n * (k / kQK);
  const unsigned grid = static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>(65535 * 4, (total + kDequantThreads - 1) /
                                                             kDequantThreads)));
  DequantKernel<kType, OutT><<<grid, kDequantThreads, 0, stream>>>(
      static_cast<const uint8_t*>(src), stride, n, k, static_cast<OutT*>(dst));
  return cudaGetLastError();
}

template <typename OutT>
cudaError_t DequantTo(WeightType type, const void* src, int64_t stride, int64_t n, int64_t k,
                      void* dst, cudaStream_t stream) {
  switch (type) {
    case WeightType::kF32:
      return LaunchDequant<WeightType::kF32, OutT>(src, stride, n, k, dst, stream);
    case WeightType::kF16:
      return LaunchDequant<WeightType::kF16, OutT>(src, stride, n, k, dst, stream);
    case WeightType::kBF16:
      return LaunchDequant<WeightType::kBF16, OutT>(src, stride, n, k, dst, stream);
    case WeightType::kQ4_0:
      return LaunchDequant<WeightType::kQ4_0, OutT>(src, stride, n, k, dst, stream);
    case WeightType::kQ4_1:
      return LaunchDequant<WeightType::kQ4_1, OutT>(src, stride, n, k, dst, stream);
    case WeightType::kQ8_0:
      return LaunchDequant<WeightType::kQ8_0, OutT>(src, stride, n, k, dst, stream);
    case WeightType::kQ5_0:
      return LaunchDequant<WeightType::kQ5_0, OutT>(src, stride, n, k, dst, stream);
    case WeightType::kQ5_1:
      return LaunchDequant<WeightType::kQ5_1, OutT>(src, stride, n, k, dst, stream);
    case WeightType::kQ4_K:
      return LaunchDequant<WeightType::kQ4_K, OutT>(src, stride, n, k, dst, stream);
    case WeightType::kQ5_K:
      return LaunchDequant<WeightType::kQ5_K, OutT>(src, stride, n, k, dst, stream);
    case WeightType::kQ6_K:
      return LaunchDequant<WeightType::kQ6_K, OutT>(src, stride, n, k, dst, stream);
  }
  return cudaErrorInvalidValue;
}

template <bool kSwiGlu, bool kNorm, typename KvT = void>
cudaError_t LaunchGemv(const GemvWeights& w, const uint16_t* x, int64_t ldx, const GemvNorm& norm,
                       int32_t m, float* y, int64_t ldy, bool accumulate, uint16_t* act,
                       int64_t ld_act, cudaStream_t stream, const RopeKvArgs& rope = {},
                       const PagedKvView& kv = {}) {
  const int64_t outputs = kSwiGlu ? w.n / 2 : w.n;
  const unsigned grid = static_cast<unsigned>((outputs + kGemvWarps - 1) / kGemvWarps);
  const size_t smem = kNorm ? GemvNormSmemBytes(w.k, m) : 0;
  const auto* xb = reinterpret_cast<const __nv_bfloat16*>(x);
  auto* ab = reinterpret_cast<__nv_bfloat16*>(act);
#define WEFT_GEMV_CASE(T)                                                                 \
  case WeightType::T:                                                                     \
    return LaunchKernel(GemvKernel<WeightType::T, kSwiGlu, kNorm, KvT>, dim3(grid),      \
                        dim3(kGemvWarps * 32), smem, stream, w, xb, ldx, norm, m, y, ldy, \
                        accumulate, ab, ld_act, rope, kv);
  switch (w.type) {
    WEFT_GEMV_CASE(kQ4_0)
    WEFT_GEMV_CASE(kQ4_1)
    WEFT_GEMV_CASE(kQ8_0)
    WEFT_GEMV_CASE(kQ5_0)
    WEFT_GEMV_CASE(kQ5_1)
    WEFT_GEMV_CASE(kQ4_K)
    WEFT_GEMV_CASE(kQ5_K)
    WEFT_GEMV_CASE(kQ6_K)
    default:
      return cudaErrorInvalidValue;
  }
#undef WEFT_GEMV_CASE
}
bool GemvArgsValid(const GemvWeights& w, int64_t ldx, int32_t m) {
  return m >= 0 && m <= kMaxGemvRows && w.k > 0 && w.k % BlockWeights(w.type) == 0 &&
         ldx % 8 == 0 && w.n >= 0 && HasGemv(w.type) &&
         (w.type != WeightType::kQ4_1 || w.m != nullptr);
}

bool GemvNormValid(const GemvWeights& w, const GemvNorm& norm, int32_t m) {
  return norm.x != nullptr && norm.weight != nullptr && norm.ldx >= w.k &&
         GemvNormFits(w.k, m);
}

}  // namespace

cudaError_t DequantizeWeights(WeightType type, const void* src, int64_t src_row_stride,
                              int64_t n, int64_t k, void* dst, WeightDtype dtype,
                              cudaStream_t stream) {
  if (n < 0 || k <= 0 || k % kQK != 0 || k % BlockWeights(type) != 0 ||
      src_row_stride < GgufRowBytes(type, k)) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  return dtype == WeightDtype::kBf16
             ? DequantTo<__nv_bfloat16>(type, src, src_row_stride, n, k, dst, stream)
             : DequantTo<__half>(type, src, src_row_stride, n, k, dst, stream);
}

cudaError_t QuantGemv(const GemvWeights& w, const uint16_t* x, int64_t ldx, int32_t m,
                      float* y, int64_t ldy, bool accumulate, cudaStream_t stream) {
  if (!GemvArgsValid(w, ldx, m)) return cudaErrorInvalidValue;
  if (m == 0 || w.n == 0) return cudaSuccess;
  return LaunchGemv<false, false>(w, x, ldx, GemvNorm{}, m, y, ldy, accumulate, nullptr, 0,
                                  stream);
}

cudaError_t QuantGemvSwiGlu(const GemvWeights& w, const uint16_t* x, int64_t ldx, int32_t m,
                            uint16_t* act, int64_t ld_act, cudaStream_t stream) {
  if (!GemvArgsValid(w, ldx, m) || w.n % 2 != 0) return cudaErrorInvalidValue;
  if (m == 0 || w.n == 0) return cudaSuccess;
  return LaunchGemv<true, false>(w, x, ldx, GemvNorm{}, m, nullptr, 0, false, act, ld_act,
                                 stream);
}

cudaError_t QuantGemvNormed(const GemvWeights& w, const GemvNorm& norm, int32_t m, float* y,
                            int64_t ldy, bool accumulate, cudaStream_t stream) {
  if (!GemvArgsValid(w, w.k, m) || !GemvNormValid(w, norm, m)) return cudaErrorInvalidValue;
  if (m == 0 || w.n == 0) return cudaSuccess;
  return LaunchGemv<false, true>(w, nullptr, w.k, norm, m, y, ldy, accumulate, nullptr, 0,
                                 stream);
}

cudaError_t QuantGemvNormedSwiGlu(const GemvWeights& w, const GemvNorm& norm, int32_t m,
                                  uint16_t* act, int64_t ld_act, cudaStream_t stream) {
  if (!GemvArgsValid(w, w.k, m) || !GemvNormValid(w, norm, m) || w.n % 2 != 0) {
    return cudaErrorInvalidValue;
  }
  if (m == 0 || w.n == 0) return cudaSuccess;
  return LaunchGemv<true, true>(w, nullptr, w.k, norm, m, nullptr, 0, false, act, ld_act,
                                stream);
}

namespace {

bool RopeKvFits(const GemvWeights& w, const RopeKvArgs& rope, const PagedKvView& kv) {
  const int64_t hd = kv.head_dim;
  return hd > 0 && hd % kKvInt8Group == 0 && rope.num_heads >= 0 && kv.num_kv_heads > 0 &&
         w.n == (int64_t{rope.num_heads} + 2 * kv.num_kv_heads) * hd &&
         rope.style == RopeStyle::kNormal && rope.rot_dim >= 0 && rope.rot_dim % 2 == 0 &&
         rope.rot_dim <= hd && rope.positions != nullptr && rope.slot_mapping != nullptr &&
         (rope.rot_dim == 0 || rope.inv_freq != nullptr) && kv.block_size > 0 &&
         (kv.dtype != KvDtype::kInt8 || (kv.k_scale != nullptr && kv.v_scale != nullptr));
}

template <bool kNorm>
cudaError_t LaunchGemvRopeKv(const GemvWeights& w, const uint16_t* x, int64_t ldx,
                             const GemvNorm& norm, int32_t m, float* qkv, int64_t ld_qkv,
                             const RopeKvArgs& rope, const PagedKvView& kv,
                             cudaStream_t stream) {
  switch (kv.dtype) {
    case KvDtype::kF16:
      return LaunchGemv<false, kNorm, __half>(w, x, ldx, norm, m, qkv, ld_qkv, false, nullptr,
                                              0, stream, rope, kv);
    case KvDtype::kBf16:
      return LaunchGemv<false, kNorm, __nv_bfloat16>(w, x, ldx, norm, m, qkv, ld_qkv, false,
                                                     nullptr, 0, stream, rope, kv);
    case KvDtype::kInt8:
      return LaunchGemv<false, kNorm, int8_t>(w, x, ldx, norm, m, qkv, ld_qkv, false, nullptr,
                                              0, stream, rope, kv);
    case KvDtype::kF32:  // CPU only
      break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t QuantGemvRopeKv(const GemvWeights& w, const uint16_t* x, int64_t ldx,
                            const GemvNorm* norm, int32_t m, float* qkv, int64_t ld_qkv,
                            const RopeKvArgs& rope, const PagedKvView& kv,
                            cudaStream_t stream) {
  const int64_t x_ld = norm != nullptr ? w.k : ldx;
  if (!GemvArgsValid(w, x_ld, m) || !RopeKvFits(w, rope, kv) ||
      (norm != nullptr && !GemvNormValid(w, *norm, m))) {
    return cudaErrorInvalidValue;
  }
  if (m == 0) return cudaSuccess;
  return norm != nullptr
             ? LaunchGemvRopeKv<true>(w, nullptr, w.k, *norm, m, qkv, ld_qkv, rope, kv, stream)
             : LaunchGemvRopeKv<false>(w, x, ldx, GemvNorm{}, m, qkv, ld_qkv, rope, kv, stream);
}

#endif  // !WEFT_CUDA_HOST_EMULATION

}  // namespace weft::kernels::cuda

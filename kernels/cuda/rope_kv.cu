// Kernel of rope_kv.h.
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kv_store.cuh"
#include "kernels/cuda/rope_kv.h"
#if !defined(WEFT_CUDA_HOST_EMULATION)
#include "kernels/cuda/launch.cuh"
#endif

namespace weft::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxHalf = 512;  // rot_dim <= 1024

// Rotated value of dim d of one head row `x` (ApplyRope's two expressions:
// x0 c - x1 s for the first member of a pair, x0 s + x1 c for the second).
__device__ __forceinline__ float Rotated(const float* x, int d, int rot_dim, int half,
                                         bool neox, const float* cos_s, const float* sin_s) {
  if (d >= rot_dim) return x[d];
  int i, first;
  bool second;
  if (neox) {
    second = d >= half;
    i = second ? d - half : d;
    first = i;
  } else {
    second = (d & 1) != 0;
    i = d >> 1;
    first = 2 * i;
  }
  const int mate = neox ? half : 1;
  const float x0 = x[first], x1 = x[first + mate];
  const float c = cos_s[i], s = sin_s[i];
  return second ? RopeSecond(x0, x1, c, s) : RopeFirst(x0, x1, c, s);
}

template <typename KvT>
__global__ void __launch_bounds__(kThreads) RopeKvKernel(RopeKvArgs a, PagedKvView kv) {
  __shared__ float cos_s[kMaxHalf];
  __shared__ float sin_s[kMaxHalf];
  PdlBegin();  // launch.h
  const int64_t t = blockIdx.x;
  const int half = a.rot_dim / 2;
  const int hd = kv.head_dim;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    RopeCosSin(a.positions[t], a.inv_freq[i], &cos_s[i], &sin_s[i]);
  }
  __syncthreads();
  const bool neox = a.style != RopeStyle::kNormal;
  float* row = a.qkv + t * a.stride;
  // q: one thread per rotation pair, in place (pairs are disjoint: no races).
  const int mate = neox ? half : 1;
  const int step = neox ? 1 : 2;
  for (int j = threadIdx.x; j < a.num_heads * half; j += blockDim.x) {
    const int head = j / half, i = j % half;
    float* p = row + int64_t{head} * hd + i * step;
    const float x0 = p[0], x1 = p[mate];
    const float c = cos_s[i], s = sin_s[i];
    p[0] = RopeFirst(x0, x1, c, s);
    p[mate] = RopeSecond(x0, x1, c, s);
  }
  const int64_t slot_id = a.slot_mapping[t];
  if (slot_id < 0) return;  // padding: q only
  const int groups_per_head = hd / kKvInt8Group;
  const float* k_src = row + int64_t{a.num_heads} * hd;
  const float* v_src = k_src + int64_t{kv.num_kv_heads} * hd;
  for (int gi = threadIdx.x; gi < kv.num_kv_heads * groups_per_head; gi += blockDim.x) {
    const int h = gi / groups_per_head, g = gi % groups_per_head;
    const KvGroupAt at = KvGroupIndex(kv, slot_id, h, g);
    float x[8];
    const float* kh = k_src + int64_t{h} * hd;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      x[e] = Rotated(kh, g * kKvInt8Group + e, a.rot_dim, half, neox, cos_s, sin_s);
    }
    StoreGroup(static_cast<KvT*>(kv.k) + at.data, kv.k_scale + at.scale, x);
    const float* vh = v_src + int64_t{h} * hd + g * kKvInt8Group;
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = vh[e];
    StoreGroup(static_cast<KvT*>(kv.v) + at.data, kv.v_scale + at.scale, x);
  }
}

}  // namespace

#if !defined(WEFT_CUDA_HOST_EMULATION)  // launch code (not in the host emulation build)
cudaError_t RopeAndWritePagedKv(const RopeKvArgs& args, const PagedKvView& kv,
                                cudaStream_t stream) {
  if (args.rot_dim <= 0 || args.rot_dim % 2 != 0 || args.rot_dim > kv.head_dim ||
      args.rot_dim / 2 > kMaxHalf || kv.head_dim % kKvInt8Group != 0 || kv.block_size <= 0 ||
      args.num_tokens < 0 || args.num_tokens > 0x7fffffff || args.num_heads < 0 ||
      (kv.dtype == KvDtype::kInt8 && (kv.k_scale == nullptr || kv.v_scale == nullptr))) {
    return cudaErrorInvalidValue;
  }
  if (args.num_tokens == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(args.num_tokens));
  switch (kv.dtype) {
    case KvDtype::kF16:
      return LaunchKernel(RopeKvKernel<__half>, grid, dim3(kThreads), 0, stream, args, kv);
    case KvDtype::kBf16:
      return LaunchKernel(RopeKvKernel<__nv_bfloat16>, grid, dim3(kThreads), 0, stream, args,
                          kv);
    case KvDtype::kInt8:
      return LaunchKernel(RopeKvKernel<int8_t>, grid, dim3(kThreads), 0, stream, args, kv);
    case KvDtype::kF32:  // CPU only
      break;
  }
  return cudaErrorInvalidValue;
}

#endif  // !WEFT_CUDA_HOST_EMULATION

}  // namespace weft::kernels::cuda

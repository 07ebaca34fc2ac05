// Kernels of paged_kv.h.
#include <algorithm>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kv_store.cuh"
#include "kernels/cuda/paged_kv.h"

namespace weft::kernels::cuda {
namespace {

constexpr int kWriteThreads = 128;
constexpr int kCopyThreads = 256;

template <typename KvT>
__global__ void __launch_bounds__(kWriteThreads)
    WritePagedKvKernel(PagedKvView kv, const float* __restrict__ k_src,
                       const float* __restrict__ v_src, int64_t src_stride,
                       const int64_t* __restrict__ slot_mapping) {
  const int64_t i = blockIdx.x;
  const int64_t slot_id = slot_mapping[i];
  if (slot_id < 0) return;
  const int32_t groups_per_head = kv.head_dim / kKvInt8Group;
  const int32_t num_groups = kv.num_kv_heads * groups_per_head;
  for (int32_t gi = threadIdx.x; gi < num_groups; gi += blockDim.x) {
    const int32_t h = gi / groups_per_head;
    const int32_t g = gi % groups_per_head;
    const KvGroupAt at = KvGroupIndex(kv, slot_id, h, g);
    const int64_t src = i * src_stride + int64_t{h} * kv.head_dim + g * kKvInt8Group;
    float x[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = k_src[src + e];
    StoreGroup(static_cast<KvT*>(kv.k) + at.data, kv.k_scale + at.scale, x);
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = v_src[src + e];
    StoreGroup(static_cast<KvT*>(kv.v) + at.data, kv.v_scale + at.scale, x);
  }
}

__global__ void __launch_bounds__(kCopyThreads)
    CopyKvBlocksKernel(uint4* pool, int64_t vecs_per_block, const int32_t* __restrict__ pairs) {
  const int64_t src = pairs[2 * blockIdx.x];
  const int64_t dst = pairs[2 * blockIdx.x + 1];
  const uint4* from = pool + src * vecs_per_block;
  uint4* to = pool + dst * vecs_per_block;
  for (int64_t j = blockIdx.y * int64_t{blockDim.x} + threadIdx.x; j < vecs_per_block;
       j += int64_t{gridDim.y} * blockDim.x) {
    to[j] = from[j];
  }
}

constexpr int kTableThreads = 256;

__global__ void __launch_bounds__(kTableThreads)
    UpdateBlockTablesKernel(int32_t* tables, const int32_t* __restrict__ pairs, int32_t n) {
  const int32_t i = blockIdx.x * kTableThreads + threadIdx.x;
  if (i < n) tables[pairs[2 * i]] = pairs[2 * i + 1];
}

}  // namespace

#if !defined(WEFT_CUDA_HOST_EMULATION)  // launch code (not in the host emulation build)
cudaError_t WritePagedKv(const PagedKvView& kv, const float* k_src, const float* v_src,
                         int64_t src_stride, const int64_t* slot_mapping, int64_t num_tokens,
                         cudaStream_t stream) {
  if (kv.head_dim % kKvInt8Group != 0 || kv.block_size <= 0 || num_tokens < 0 ||
      num_tokens > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  if (num_tokens == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(num_tokens));
  switch (kv.dtype) {
    case KvDtype::kF16:
      WritePagedKvKernel<__half><<<grid, kWriteThreads, 0, stream>>>(kv, k_src, v_src, src_stride,
                                                                      slot_mapping);
      break;
    case KvDtype::kBf16:
      WritePagedKvKernel<__nv_bfloat16>
          <<<grid, kWriteThreads, 0, stream>>>(kv, k_src, v_src, src_stride, slot_mapping);
      break;
    case KvDtype::kInt8:
      if (kv.k_scale == nullptr || kv.v_scale == nullptr) return cudaErrorInvalidValue;
      WritePagedKvKernel<int8_t><<<grid, kWriteThreads, 0, stream>>>(kv, k_src, v_src, src_stride,
                                                                      slot_mapping);
      break;
    case KvDtype::kF32:  // CPU only
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t CopyKvBlocks(void* pool, int64_t bytes_per_block, const int32_t* pairs,
                         int32_t num_pairs, cudaStream_t stream) {
  if (bytes_per_block % 16 != 0 || num_pairs < 0 || num_pairs > 65535 * 1024) {
    return cudaErrorInvalidValue;
  }
  if (num_pairs == 0) return cudaSuccess;
  const int64_t vecs = bytes_per_block / 16;
  const unsigned chunks = static_cast<unsigned>(
      std::min<int64_t>(65535, (vecs + kCopyThreads * 4 - 1) / (kCopyThreads * 4)));
  CopyKvBlocksKernel<<<dim3(num_pairs, chunks), kCopyThreads, 0, stream>>>(
      static_cast<uint4*>(pool), vecs, pairs);
  return cudaGetLastError();
}

cudaError_t UpdateBlockTables(int32_t* tables, const int32_t* pairs, int32_t num_pairs,
                              cudaStream_t stream) {
  if (num_pairs < 0) return cudaErrorInvalidValue;
  if (num_pairs == 0) return cudaSuccess;
  UpdateBlockTablesKernel<<<(num_pairs + kTableThreads - 1) / kTableThreads, kTableThreads, 0,
                            stream>>>(tables, pairs, num_pairs);
  return cudaGetLastError();
}

#endif  // !WEFT_CUDA_HOST_EMULATION

}  // namespace weft::kernels::cuda

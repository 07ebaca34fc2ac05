// The paged KV cache on the GPU: one layer's view, the write of a step's K/V through the
// slot mapping, and the block copies of copy-on-write. CPU twin:
// kernels/cpu/paged_attention.h (WritePagedKv) and worker/kv_cache.h (CopyBlock).
//
// Memory layout of one layer (PagedKvView), token-major ("flash" layout, unlike the
// CPU's transposed K tile: a warp reads one token's head_dim contiguous values):
//   K of (block b, kv-head h, slot s), element d:
//       k + b*block_stride + (h*block_size + s)*head_dim + d     (elements of dtype)
//   V likewise from v.
//   int8 only, the fp16 scale of group g = d / 8 of that row:
//       k_scale + b*scale_block_stride + (h*block_size + s)*(head_dim/8) + g
//   (v_scale likewise). Position p of a sequence is block table[p / block_size], slot
//   p % block_size.
// The backend (worker/backends/cuda/device_kv_cache.h) puts every layer of a block in
// one contiguous range, so a block copy is one range copy.
//
// Requirements: head_dim % 8 == 0; k, v 16-byte aligned and block_stride*element size a
// multiple of 16 bytes (true for the backend's pool).
// Thread-safety: launches on the caller's stream; concurrent launches must write
// disjoint slots.
#ifndef WEFT_KERNELS_CUDA_PAGED_KV_H_
#define WEFT_KERNELS_CUDA_PAGED_KV_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/dtypes.h"

namespace weft::kernels::cuda {

struct PagedKvView {
  void* k = nullptr;
  void* v = nullptr;
  uint16_t* k_scale = nullptr;  // int8 only (fp16 bits)
  uint16_t* v_scale = nullptr;  // int8 only
  int64_t block_stride = 0;        // elements of dtype between consecutive blocks
  int64_t scale_block_stride = 0;  // scales between consecutive blocks (int8 only)
  int32_t block_size = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  KvDtype dtype = KvDtype::kBf16;
};

// Stores token i's K and V rows (fp32, k_src/v_src + i*src_stride, num_kv_heads*head_dim
// values each, head h at h*head_dim) into slot slot_mapping[i] = block*block_size + slot
// for i in [0, num_tokens); a negative slot is skipped (padding). fp16/bf16 round to
// nearest even; int8 quantizes each group of 8 as DESIGN.md says:
//   scale = fp16(max|x| / 127),  q = clamp(roundf(x / float(scale)), -127, 127)
// (q = 0 for an all-zero group).
cudaError_t WritePagedKv(const PagedKvView& kv, const float* k_src, const float* v_src,
                         int64_t src_stride, const int64_t* slot_mapping, int64_t num_tokens,
                         cudaStream_t stream);

// Copy-on-write: for each i < num_pairs, copies bytes_per_block bytes of block
// pairs[2i] onto block pairs[2i + 1] within a pool whose block b starts at
// pool + b*bytes_per_block. `pairs` is device memory. bytes_per_block % 16 == 0, pool
// 16-byte aligned; pairs must not chain (no dst is another pair's src).
cudaError_t CopyKvBlocks(void* pool, int64_t bytes_per_block, const int32_t* pairs,
                         int32_t num_pairs, cudaStream_t stream);

// A step's block-table diff on the device's persistent tables: for each i < num_pairs,
// tables[pairs[2i]] = pairs[2i + 1] (flat index slot * max_blocks_per_seq + position, block
// id; worker/backends/cuda/sequence_slots.h). `pairs` is device memory; indices distinct.
cudaError_t UpdateBlockTables(int32_t* tables, const int32_t* pairs, int32_t num_pairs,
                              cudaStream_t stream);

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_PAGED_KV_H_

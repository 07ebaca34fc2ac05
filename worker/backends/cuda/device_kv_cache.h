// DeviceKvCache: one worker rank's paged KV cache in GPU memory.
//
// Block ids are the scheduler's (0..num_blocks-1). Every block is one contiguous range
// of bytes_per_block() bytes holding all layers (so a copy-on-write copy is one range
// copy); inside it, layer l starts at l * layer_bytes and holds
//   K data [kv_heads][block_size][head_dim]   then   V data (same shape)   (dtype)
//   int8 only, then: K scales [kv_heads][block_size][head_dim/8], V scales (fp16)
// which is kernels/cuda/paged_kv.h's PagedKvView with block strides of the whole block.
// The pool is zero-filled at creation.
// Ownership: owns the pool. Thread-safety: the rank's step thread; operations are
// queued on the caller's stream.
#ifndef WEFT_WORKER_BACKENDS_CUDA_DEVICE_KV_CACHE_H_
#define WEFT_WORKER_BACKENDS_CUDA_DEVICE_KV_CACHE_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/dtypes.h"
#include "kernels/cuda/paged_kv.h"
#include "worker/backends/cuda/device_buffer.h"
#include "worker/kv_pool.h"

namespace weft::cuda_backend {

class DeviceKvCache {
 public:
  // f16, bf16 or int8, head_dim a multiple of 8.
  static absl::StatusOr<std::unique_ptr<DeviceKvCache>> Create(const KvPoolOptions& options);
  // Bytes of one layer's part of a block, and of a whole block, of `options`' pool.
  static int64_t LayerBytes(const KvPoolOptions& options);
  static int64_t BytesPerBlock(const KvPoolOptions& options) {
    return LayerBytes(options) * options.num_layers;
  }

  const KvPoolOptions& options() const { return options_; }
  int32_t num_blocks() const { return options_.num_blocks; }
  int32_t block_size() const { return options_.block_size; }
  int64_t bytes_per_block() const { return BytesPerBlock(options_); }
  int64_t pool_bytes() const { return bytes_per_block() * options_.num_blocks; }
  void* pool() const { return pool_.get(); }

  // The kernels' view of layer `layer`.
  kernels::cuda::PagedKvView Layer(int32_t layer) const;

  // Queues the copy of block src onto block dst (all layers). OutOfRange for a bad id.
  absl::Status CopyBlock(int32_t src, int32_t dst, cudaStream_t stream);

 private:
  explicit DeviceKvCache(const KvPoolOptions& options) : options_(options) {}

  const KvPoolOptions options_;
  DeviceBuffer pool_;
};

}  // namespace weft::cuda_backend

#endif  // WEFT_WORKER_BACKENDS_CUDA_DEVICE_KV_CACHE_H_

// KvCache: one worker rank's paged KV cache, a single pool of fixed-size blocks.
//
// Every block holds `block_size` token slots of K and V for every layer and for this
// rank's KV heads. Block ids are the scheduler's (weft::BlockId values 0..num_blocks-1):
// the token at position p of a sequence lives in block block_table[p / block_size],
// slot s = p % block_size.
//
// Memory layout, in bytes, with L layers, H kv heads, D = head_dim, B = block_size and
// T = kernels::KvTileBytes(dtype, D, B) (one head's K or V tile; paged_attention.h says
// what is inside a tile for each dtype — fp32: K is a [D][B] tile, "K transposed", and V
// a [B][D] tile):
//   block b starts at   b * (L * 2 * H * T)
//   layer l of it at    + l * (2 * H * T)
//   K tile of kv-head h + h * T
//   V tile of kv-head h + H * T + h * T
// so one block is one contiguous range (CopyBlock is a single memcpy) and a layer's view
// (Layer(l), kernels::PagedKvLayer) is a base pointer plus strides.
// The pool is anonymous mmap memory: zero-filled and only touched pages use RAM.
//
// Ownership: KvCache owns the pool. Thread-safety: not synchronized; the rank's step
// thread owns it and kernels write disjoint slots.
#ifndef WEFT_WORKER_KV_CACHE_H_
#define WEFT_WORKER_KV_CACHE_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/strong_id.h"
#include "kernels/cpu/paged_attention.h"
#include "worker/kv_pool.h"

namespace weft {

class KvCache {
 public:
  // Element types as kernels/cpu/kv_layout.h lays them out (int8: one fp16 scale per
  // token and kv head; kv_layout.h says why not DESIGN.md's groups of 8).
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const KvPoolOptions& options);
  // Bytes of one block of `options`' pool (all layers, K and V), for a shape
  // options.Validate accepts.
  static int64_t BytesPerBlock(const KvPoolOptions& options);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const KvPoolOptions& options() const { return options_; }
  int32_t num_blocks() const { return options_.num_blocks; }
  int32_t block_size() const { return options_.block_size; }
  int64_t bytes_per_block() const { return bytes_per_block_; }
  // fp32 pools only.
  int64_t floats_per_block() const;
  int64_t pool_bytes() const { return bytes_per_block_ * options_.num_blocks; }

  // The kernels' view of layer `layer` (0 <= layer < num_layers).
  kernels::PagedKvLayer Layer(int32_t layer);

  // All bytes of one block (bytes_per_block() of them).
  uint8_t* BlockBytes(BlockId block);
  // fp32 pools: all floats of one block (floats_per_block() of them), e.g. to poison it
  // in tests.
  float* BlockData(BlockId block);
  const float* BlockData(BlockId block) const;

  // Copies every layer's K and V of block `src` into `dst` (copy-on-write).
  absl::Status CopyBlock(BlockId src, BlockId dst);

 private:
  KvCache(const KvPoolOptions& options, uint8_t* pool, size_t mapped_bytes);

  const KvPoolOptions options_;
  const int64_t bytes_per_block_;
  uint8_t* const pool_;
  const size_t mapped_bytes_;
};

}  // namespace weft

#endif  // WEFT_WORKER_KV_CACHE_H_

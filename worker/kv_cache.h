// KvCache: one worker rank's paged KV cache, a single pool of fixed-size blocks.
//
// Every block holds `block_size` token slots of K and V for every layer and for this
// rank's KV heads. Block ids are the scheduler's (weft::BlockId values 0..num_blocks-1):
// the token at position p of a sequence lives in block block_table[p / block_size],
// slot s = p % block_size.
//
// Memory layout (fp32, KvDtype::kF32), in floats, with L layers, H kv heads, D = head_dim,
// B = block_size:
//   block b starts at   b * (L * 2 * H * D * B)
//   layer l of it at    + l * (2 * H * D * B)
//   K of kv-head h:     + h * (D * B)                 a [D][B] tile (K transposed):
//                         K[b, l, h, slot s][d] at    + d * B + s
//   V of kv-head h:     + H * D * B + h * (D * B)     a [B][D] tile:
//                         V[b, l, h, slot s][d] at    + s * D + d
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
#include "common/strong_id.h"
#include "kernels/cpu/paged_attention.h"

namespace weft {

// Element type of the pool. Only kF32 (the reference path) exists so far; kBf16 and
// kInt8 (DESIGN.md: groups of 8 along head_dim, fp16 scale) are reserved.
enum class KvDtype {
  kF32,
  kBf16,
  kInt8,
};

struct KvCacheOptions {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;  // this rank's
  int32_t head_dim = 0;
  int32_t block_size = 16;
  int32_t num_blocks = 0;
  KvDtype dtype = KvDtype::kF32;

  absl::Status Validate() const;
  // Bytes of one block (all layers, K and V); requires the shape fields to be valid.
  int64_t BytesPerBlock() const;
};

class KvCache {
 public:
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const KvCacheOptions& options);
  // As Create, with num_blocks = floor(budget_bytes / BytesPerBlock()) (at least 1).
  static absl::StatusOr<std::unique_ptr<KvCache>> CreateWithBudget(KvCacheOptions options,
                                                                   int64_t budget_bytes);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const KvCacheOptions& options() const { return options_; }
  int32_t num_blocks() const { return options_.num_blocks; }
  int32_t block_size() const { return options_.block_size; }
  int64_t floats_per_block() const { return floats_per_block_; }
  int64_t pool_bytes() const { return floats_per_block_ * options_.num_blocks * 4; }

  // The kernels' view of layer `layer` (0 <= layer < num_layers).
  kernels::PagedKvLayer Layer(int32_t layer);

  // All floats of one block (floats_per_block() of them), e.g. to poison it in tests.
  float* BlockData(BlockId block);
  const float* BlockData(BlockId block) const;

  // Copies every layer's K and V of block `src` into `dst` (copy-on-write).
  absl::Status CopyBlock(BlockId src, BlockId dst);

 private:
  KvCache(const KvCacheOptions& options, float* pool, size_t mapped_bytes);

  const KvCacheOptions options_;
  const int64_t floats_per_block_;
  float* const pool_;
  const size_t mapped_bytes_;
};

}  // namespace weft

#endif  // WEFT_WORKER_KV_CACHE_H_

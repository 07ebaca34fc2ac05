// KvPoolOptions: the shape of one worker rank's paged KV pool — the one options type of
// the CPU pool (kv_cache.h) and the GPU pool (backends/cuda/device_kv_cache.h), which
// each lay a block out their own way (their BytesPerBlock) — and the one rule that sizes
// a pool from a memory budget (--kv_memory_bytes) when no block count is given.
// Thread-safety: value types and pure functions.
#ifndef WEFT_WORKER_KV_POOL_H_
#define WEFT_WORKER_KV_POOL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv_dtype.h"

namespace weft {

struct KvPoolOptions {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;  // this rank's
  int32_t head_dim = 0;
  int32_t block_size = 16;
  int32_t num_blocks = 0;
  KvDtype dtype = kDefaultKvDtype;

  // A positive shape, block_size in [1, 1024], num_blocks > 0, and a pool of num_blocks
  // blocks of `bytes_per_block` (the layout's) well inside an int64.
  absl::Status Validate(int64_t bytes_per_block) const;
};

// `num_blocks` when it is > 0; else as many blocks of `bytes_per_block` as
// `budget_bytes` holds (INVALID_ARGUMENT when not even one, or more than 2^31 - 1).
absl::StatusOr<int32_t> KvPoolBlocks(int32_t num_blocks, int64_t budget_bytes,
                                     int64_t bytes_per_block);

}  // namespace weft

#endif  // WEFT_WORKER_KV_POOL_H_

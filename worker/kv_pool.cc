#include "worker/kv_pool.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace weft {

absl::Status KvPoolOptions::Validate(int64_t bytes_per_block) const {
  if (num_layers <= 0 || num_kv_heads <= 0 || head_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache shape must be positive: layers ", num_layers, ", kv heads ", num_kv_heads,
        ", head_dim ", head_dim));
  }
  if (block_size <= 0 || block_size > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("block_size ", block_size,
                                                   " is outside [1, 1024]"));
  }
  if (num_blocks <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_blocks ", num_blocks, " must be > 0"));
  }
  if (bytes_per_block <= 0 ||
      num_blocks > std::numeric_limits<int64_t>::max() / 4 / bytes_per_block) {
    return absl::InvalidArgumentError("KV pool size overflows");
  }
  return absl::OkStatus();
}

absl::StatusOr<int32_t> KvPoolBlocks(int32_t num_blocks, int64_t budget_bytes,
                                     int64_t bytes_per_block) {
  if (num_blocks > 0) return num_blocks;
  if (bytes_per_block <= 0 || budget_bytes < bytes_per_block) {
    return absl::InvalidArgumentError(absl::StrCat("KV budget of ", budget_bytes,
                                                   " bytes is less than one block (",
                                                   bytes_per_block, " bytes)"));
  }
  const int64_t blocks = budget_bytes / bytes_per_block;
  if (blocks > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError("KV budget gives more than 2^31 blocks");
  }
  return static_cast<int32_t>(blocks);
}

}  // namespace weft

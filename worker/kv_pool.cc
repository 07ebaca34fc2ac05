#include "worker/kv_pool.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

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

absl::Status ValidateGpuMemoryUtilization(double utilization) {
  if (!(utilization > 0 && utilization <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpu_memory_utilization must be in (0, 1], got ", utilization));
  }
  return absl::OkStatus();
}

absl::StatusOr<KvPoolSizing> SizeDeviceKvPool(int32_t num_blocks, int64_t budget_bytes,
                                              double utilization, const DeviceMemory& memory,
                                              int64_t reserve_bytes, int64_t bytes_per_block) {
  KvPoolSizing out;
  if (num_blocks > 0 || budget_bytes > 0) {
    WEFT_ASSIGN_OR_RETURN(out.num_blocks, KvPoolBlocks(num_blocks, budget_bytes, bytes_per_block));
    out.source = num_blocks > 0 ? absl::StrCat("--num_kv_blocks=", num_blocks)
                                : absl::StrCat("--kv_memory_bytes=", budget_bytes);
  } else {
    WEFT_RETURN_IF_ERROR(ValidateGpuMemoryUtilization(utilization));
    if (memory.total_bytes <= 0 || memory.free_bytes < 0 ||
        memory.free_bytes > memory.total_bytes || reserve_bytes < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device memory figures out of range: free ", memory.free_bytes, " of ",
          memory.total_bytes, " bytes, reserve ", reserve_bytes));
    }
    const int64_t allowed =
        static_cast<int64_t>(utilization * static_cast<double>(memory.total_bytes));
    const int64_t in_use = memory.total_bytes - memory.free_bytes;
    const int64_t budget = allowed - in_use - reserve_bytes;
    const std::string figures = absl::StrCat(
        "--gpu_memory_utilization=", utilization, " of ", memory.total_bytes,
        " bytes: ", allowed, " allowed - ", in_use, " in use (weights, context, other "
        "processes) - ", reserve_bytes, " reserved for activations = ", budget, " bytes");
    if (budget < bytes_per_block || bytes_per_block <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "no room for the KV pool: ", figures, ", less than one block (", bytes_per_block,
          " bytes); raise --gpu_memory_utilization or set --kv_memory_bytes"));
    }
    WEFT_ASSIGN_OR_RETURN(out.num_blocks, KvPoolBlocks(0, budget, bytes_per_block));
    out.source = figures;
  }
  out.bytes = int64_t{out.num_blocks} * bytes_per_block;
  return out;
}

}  // namespace weft

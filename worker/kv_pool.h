// KvPoolOptions: the shape of one worker rank's paged KV pool — the one options type of
// the CPU pool (kv_cache.h) and the GPU pool (backends/cuda/device_kv_cache.h), which
// each lay a block out their own way (their BytesPerBlock) — and the one rule that sizes
// a pool from a memory budget (--kv_memory_bytes) when no block count is given.
// Thread-safety: value types and pure functions.
#ifndef WEFT_WORKER_KV_POOL_H_
#define WEFT_WORKER_KV_POOL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv_dtype.h"

namespace weft {

// The host backends' (cpu, null) KV budget when --kv_memory_bytes is not given.
inline constexpr int64_t kDefaultHostKvMemoryBytes = int64_t{1} << 30;

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

// The rule that sizes a device's pool (--backend=cuda), in order of precedence:
//   1. `num_blocks` > 0                     (--num_kv_blocks)
//   2. `budget_bytes` > 0                   (--kv_memory_bytes given)
//   3. from the device's memory as vLLM's --gpu_memory_utilization means it: this
//      process may use `utilization` x total device memory in all; what is in use now
//      (device_total - device_free: its weights, its context, other processes) and
//      `reserve_bytes` (buffers allocated after the pool: activations, workspaces,
//      graphs) come out of that, the pool gets the rest:
//        budget = utilization x total - (total - free) - reserve
//      INVALID_ARGUMENT when that leaves less than one block (the message gives the
//      figures), or when utilization is outside (0, 1].
// `source` says which rule chose the size and its figures, for the log.
struct KvPoolSizing {
  int32_t num_blocks = 0;
  int64_t bytes = 0;  // num_blocks x bytes_per_block
  std::string source;
};
struct DeviceMemory {
  int64_t free_bytes = 0;   // cudaMemGetInfo after the weights are loaded
  int64_t total_bytes = 0;
};
absl::StatusOr<KvPoolSizing> SizeDeviceKvPool(int32_t num_blocks, int64_t budget_bytes,
                                              double utilization, const DeviceMemory& memory,
                                              int64_t reserve_bytes, int64_t bytes_per_block);

// --gpu_memory_utilization's range, (0, 1] (the flag's and the rule's one check).
absl::Status ValidateGpuMemoryUtilization(double utilization);

}  // namespace weft

#endif  // WEFT_WORKER_KV_POOL_H_

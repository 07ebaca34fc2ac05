// CudaBackendFlags: the worker flags the CUDA backend takes, in a header both builds
// compile (the default build refuses --backend=cuda later, in MakeCudaBackend, but checks
// the values the same way), and the rules of the ones only the CUDA backend reads —
// the one place CudaBackendOptions::Validate and OptionsFromFlags check them.
// Thread-safety: value types and pure functions.
#ifndef WEFT_WORKER_BACKENDS_CUDA_FLAGS_H_
#define WEFT_WORKER_BACKENDS_CUDA_FLAGS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/kv_dtype.h"
#include "worker/kv_pool.h"

namespace weft {

// --max_graph_batch: a power of two in [1, 1024] (graphs are captured per bucket 1, 2, 4,
// ..., this).
inline absl::Status ValidateMaxGraphBatch(int32_t max_graph_batch) {
  if (max_graph_batch < 1 || max_graph_batch > 1024 ||
      (max_graph_batch & (max_graph_batch - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_graph_batch must be a power of two in [1, 1024], got ", max_graph_batch));
  }
  return absl::OkStatus();
}

// --max_graph_tokens: a power of two in [16, 4096] (piecewise graphs are captured per
// token bucket 16, 32, ..., this; --graph_mixed_steps).
inline absl::Status ValidateMaxGraphTokens(int32_t max_graph_tokens) {
  if (max_graph_tokens < 16 || max_graph_tokens > 4096 ||
      (max_graph_tokens & (max_graph_tokens - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_graph_tokens must be a power of two in [16, 4096], got ", max_graph_tokens));
  }
  return absl::OkStatus();
}

// --quant_gemm_max_rows: steps of up to this many token rows run their quantized matrices
// through the fused dequantize + tensor-core GEMM (kernels/cuda/quant_gemm.h, which
// takes at most kMaxQuantGemmRows = 256 rows; cuda_backend.cc asserts the two agree)
// instead of cuBLAS on the bf16 copy; 0: never.
inline constexpr int32_t kMaxQuantGemmMaxRows = 256;
inline absl::Status ValidateQuantGemmMaxRows(int32_t rows) {
  if (rows < 0 || rows > kMaxQuantGemmMaxRows) {
    return absl::InvalidArgumentError(absl::StrCat("--quant_gemm_max_rows must be in [0, ",
                                                   kMaxQuantGemmMaxRows, "], got ", rows));
  }
  return absl::OkStatus();
}

struct CudaBackendFlags {
  int32_t rank = 0;
  int32_t world_size = 1;
  int32_t device = -1;  // -1: rank % device count
  int32_t block_size = 16;
  // KV pool: num_kv_blocks if > 0, else kv_memory_bytes if > 0, else from the device's
  // memory under gpu_memory_utilization (SizeDeviceKvPool, worker/kv_pool.h).
  int32_t num_kv_blocks = 0;
  int64_t kv_memory_bytes = 0;
  double gpu_memory_utilization = 0.9;
  KvDtype kv_dtype = kDefaultKvDtype;  // --kv_dtype (ParseKvDtype); f32 is CPU-only
  bool cuda_graphs = true;
  int32_t max_graph_batch = 256;
  // Steps with prefill chunks (and decode batches over max_graph_batch) of up to
  // max_graph_tokens tokens as piecewise graphs around eager attention.
  bool graph_mixed_steps = true;
  int32_t max_graph_tokens = 2048;
  int32_t quant_gemm_max_rows = 0;
  bool device_sampling = true;
  double collective_timeout_s = 10;

  absl::Status Validate() const {
    if (kv_memory_bytes < 0) return absl::InvalidArgumentError("--kv_memory_bytes must be >= 0");
    if (absl::Status s = ValidateGpuMemoryUtilization(gpu_memory_utilization); !s.ok()) return s;
    if (absl::Status s = ValidateMaxGraphTokens(max_graph_tokens); !s.ok()) return s;
    if (absl::Status s = ValidateQuantGemmMaxRows(quant_gemm_max_rows); !s.ok()) return s;
    return ValidateMaxGraphBatch(max_graph_batch);
  }
};

}  // namespace weft

#endif  // WEFT_WORKER_BACKENDS_CUDA_FLAGS_H_

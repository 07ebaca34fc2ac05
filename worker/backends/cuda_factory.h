// MakeCudaBackend: the CUDA backend behind a CUDA-free interface, so that weft-worker
// depends on CUDA only in a --config=cuda build. Two implementations are selected by
// //:cuda_enabled: cuda_factory.cc (builds worker/backends/cuda's CudaBackend) and
// cuda_factory_stub.cc (the default build: CudaBackendAvailable() is false and
// MakeCudaBackend fails with FailedPrecondition, saying how to get a CUDA build).
// Thread-safety: pure functions.
#ifndef WEFT_WORKER_BACKENDS_CUDA_FACTORY_H_
#define WEFT_WORKER_BACKENDS_CUDA_FACTORY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/gguf.h"
#include "worker/backends/backend.h"
#include "worker/backends/cuda_flags.h"
#include "worker/kv_cache.h"

namespace weft {

// True when this binary contains the CUDA backend.
bool CudaBackendAvailable();

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const GgufFile& file,
                                                         const CudaBackendFlags& flags);

}  // namespace weft

#endif  // WEFT_WORKER_BACKENDS_CUDA_FACTORY_H_

// The default build's MakeCudaBackend (see cuda_factory.h): no CUDA in this binary.
#include "worker/backends/cuda_factory.h"

namespace weft {

bool CudaBackendAvailable() { return false; }

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const GgufFile&,
                                                         const CudaBackendFlags&) {
  return absl::FailedPreconditionError(
      "this weft-worker was built without CUDA; build it with "
      "`bazel build --config=cuda //worker/service:weft-worker` or use --backend=cpu");
}

}  // namespace weft

// The --config=cuda build's MakeCudaBackend (see cuda_factory.h).
#include "worker/backends/cuda_factory.h"

#include "worker/backends/cuda/cuda_backend.h"

namespace weft {

bool CudaBackendAvailable() { return true; }

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const GgufFile& file,
                                                         const CudaBackendFlags& flags) {
  CudaBackendOptions o;
  o.rank = flags.rank;
  o.world_size = flags.world_size;
  o.device = flags.device;
  o.block_size = flags.block_size;
  o.num_kv_blocks = flags.num_kv_blocks;
  o.kv_memory_bytes = flags.kv_memory_bytes;
  o.gpu_memory_utilization = flags.gpu_memory_utilization;
  o.max_graph_batch = flags.max_graph_batch;
  o.graph_mixed_steps = flags.graph_mixed_steps;
  o.max_graph_tokens = flags.max_graph_tokens;
  o.quant_gemm_max_rows = flags.quant_gemm_max_rows;
  // The device kernels have no f32 KV.
  if (flags.kv_dtype == KvDtype::kF32) {
    return absl::InvalidArgumentError("--backend=cuda: --kv_dtype must be f16, bf16 or int8");
  }
  o.kv_dtype = flags.kv_dtype;
  o.cuda_graphs = flags.cuda_graphs;
  o.device_sampling = flags.device_sampling;
  o.comm_timeout = absl::Seconds(flags.collective_timeout_s);
  auto b = CudaBackend::Create(file, o);
  if (!b.ok()) return b.status();
  return std::unique_ptr<Backend>(std::move(*b));
}

}  // namespace weft

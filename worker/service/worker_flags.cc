#include "worker/service/worker_flags.h"

#include <algorithm>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/kv_dtype.h"
#include "worker/model/linear.h"

ABSL_FLAG(std::string, scheduler, "127.0.0.1:50052", "host:port of the scheduler's worker port");
ABSL_FLAG(std::string, model, "", "GGUF model file (required)");
ABSL_FLAG(std::string, replica, "replica-0", "replica (tensor-parallel group) name");
ABSL_FLAG(int32_t, rank, 0, "this process's rank in its replica");
ABSL_FLAG(int32_t, world_size, 1, "ranks in the replica (tensor-parallel size)");
ABSL_FLAG(std::string, backend, "cpu", "cpu | cuda | null (no model arithmetic)");
ABSL_FLAG(std::string, kernels, "auto",
          "CPU kernels: auto | avx512vnni | avx2 | reference | avx512 | packed (auto: the fastest "
          "this CPU runs; avx512/packed are fp32 paths)");
ABSL_FLAG(std::string, kv_dtype, weft::KvDtypeName(weft::kDefaultKvDtype),
          weft::kKvDtypeFlagHelp);
ABSL_FLAG(int32_t, threads, 0, "compute threads (0: the cores divided by --world_size)");
ABSL_FLAG(int32_t, block_size, 16, "KV block size in tokens (must equal the scheduler's)");
ABSL_FLAG(int32_t, num_kv_blocks, 0, "KV blocks (0: as many as --kv_memory_bytes holds)");
ABSL_FLAG(int64_t, kv_memory_bytes, 0,
          "KV pool budget in bytes (0: cpu/null 1 GiB; cuda: from --gpu_memory_utilization)");
ABSL_FLAG(double, gpu_memory_utilization, 0.9,
          "--backend=cuda: the share of the device's total memory this worker may use (vLLM's "
          "meaning); the KV pool gets what the weights, other processes and an activation "
          "reserve leave of it. --num_kv_blocks or --kv_memory_bytes override it");
ABSL_FLAG(int32_t, max_graph_batch, 256,
          "--backend=cuda: largest decode batch run as a CUDA graph (a power of two <= 1024; "
          "graphs are captured per bucket 1, 2, 4, ..., this)");
ABSL_FLAG(bool, graph_mixed_steps, true,
          "--backend=cuda: run steps with prefill chunks (and decode batches over "
          "--max_graph_batch) as piecewise CUDA graphs — everything but attention captured per "
          "token bucket, attention launched between the pieces (false: eagerly)");
ABSL_FLAG(int32_t, max_graph_tokens, 2048,
          "--backend=cuda with --graph_mixed_steps: largest step (in tokens) run as piecewise "
          "graphs (a power of two in [16, 4096]; buckets 16, 32, ..., this; larger steps run "
          "eagerly)");
ABSL_FLAG(int32_t, quant_gemm_max_rows, 0,
          "--backend=cuda: steps of up to this many token rows (and more than the GEMV's 4) "
          "multiply by the quantized weights with the fused dequantize + tensor-core GEMM "
          "instead of cuBLAS on their bf16 copy (0: off; at most 256). Off by default: on an "
          "H200 it tied cuBLAS on the default model and served fewer tok/s at 256 streams");
ABSL_FLAG(double, collective_timeout_s, 10,
          "tensor parallelism: a collective fails (and the step with it) if a peer rank has not "
          "joined it within this long");
ABSL_FLAG(int32_t, metrics_port, -1, "Prometheus /metrics HTTP port (-1: off, 0: any free port)");
ABSL_FLAG(double, give_up_after_s, 0, "exit if no scheduler is reachable for this long (0: never)");
ABSL_FLAG(std::string, ports_file, "",
          "write the bound metrics port here as JSON {\"metrics_port\": N} once the model is "
          "loaded");
ABSL_FLAG(double, drain_timeout_s, 75,
          "SIGTERM: exit after this long even if the scheduler has not finished draining the "
          "replica (0: no bound). Keep it above the scheduler's --worker_drain_timeout_s "
          "(default 60) and below Kubernetes' terminationGracePeriodSeconds");
ABSL_FLAG(std::string, worker_tls_cert, "",
          "mutual TLS to the attach port: this worker's PEM certificate (from the cluster CA)");
ABSL_FLAG(std::string, worker_tls_key, "", "PEM private key of --worker_tls_cert");
ABSL_FLAG(std::string, worker_tls_ca, "",
          "PEM CA bundle that signed the scheduler's attach-port certificate");
ABSL_FLAG(std::string, worker_tls_server_name, "",
          "name the scheduler's certificate must carry (default: the --scheduler host)");
ABSL_FLAG(int32_t, cuda_device, -1, "--backend=cuda: CUDA device (-1: rank % device count)");
ABSL_FLAG(bool, cuda_graphs, true, "--backend=cuda: run decode steps as CUDA graphs");
ABSL_FLAG(bool, device_sampling, true,
          "--backend=cuda|null: sample on the device (steps that want logprobs use the host)");
ABSL_FLAG(double, null_step_ms, 0,
          "--backend=null: least time of a forward pass in ms (the step thread sleeps)");
ABSL_FLAG(double, null_eos_probability, 0,
          "--backend=null: chance that a token is end-of-generation (0: streams run to "
          "max_tokens)");

namespace weft {
namespace {

absl::StatusOr<BackendKind> ParseBackend(const std::string& name) {
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "null") return BackendKind::kNull;
  if (name != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend must be cpu, cuda or null, got '", name, "'"));
  }
  if (!CudaBackendAvailable()) {
    return absl::InvalidArgumentError(
        "--backend=cuda: this weft-worker was built without CUDA; build it with "
        "`bazel build --config=cuda //worker/service:weft-worker` or use --backend=cpu");
  }
  return BackendKind::kCuda;
}

// The CPU backend's options, whose pool and rank fields the other backends copy.
absl::Status CpuFromFlags(const ModelExecutorOptions& eo, int hardware_threads,
                          CpuBackendOptions* bo) {
  absl::StatusOr<KernelChoice> kernels = ParseKernelChoice(absl::GetFlag(FLAGS_kernels));
  if (!kernels.ok()) return kernels.status();
  absl::StatusOr<KvDtype> kv_dtype = ParseKvDtype(absl::GetFlag(FLAGS_kv_dtype));
  if (!kv_dtype.ok()) return kv_dtype.status();
  bo->block_size = absl::GetFlag(FLAGS_block_size);
  bo->num_kv_blocks = absl::GetFlag(FLAGS_num_kv_blocks);
  const int64_t kv_bytes = absl::GetFlag(FLAGS_kv_memory_bytes);
  if (kv_bytes < 0) return absl::InvalidArgumentError("--kv_memory_bytes must be >= 0");
  bo->kv_memory_bytes = kv_bytes > 0 ? kv_bytes : kDefaultHostKvMemoryBytes;
  bo->model.kernels = *kernels;
  bo->model.kv_dtype = *kv_dtype;
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads <= 0) {
    threads = std::max(1, std::max(1, hardware_threads) / std::max(1, eo.world_size));
  }
  bo->model.num_threads = threads;
  bo->rank = eo.rank;
  bo->world_size = eo.world_size;
  bo->collective_timeout = absl::Seconds(absl::GetFlag(FLAGS_collective_timeout_s));
  return bo->Validate();
}

absl::Status OtherBackendsFromFlags(WorkerBinaryOptions* o) {
  const CpuBackendOptions& bo = o->cpu;
  CudaBackendFlags& cf = o->cuda;
  cf.rank = bo.rank;
  cf.world_size = bo.world_size;
  cf.device = absl::GetFlag(FLAGS_cuda_device);
  cf.block_size = bo.block_size;
  cf.num_kv_blocks = bo.num_kv_blocks;
  cf.kv_memory_bytes = absl::GetFlag(FLAGS_kv_memory_bytes);  // 0: from the device
  cf.gpu_memory_utilization = absl::GetFlag(FLAGS_gpu_memory_utilization);
  cf.max_graph_batch = absl::GetFlag(FLAGS_max_graph_batch);
  cf.graph_mixed_steps = absl::GetFlag(FLAGS_graph_mixed_steps);
  cf.max_graph_tokens = absl::GetFlag(FLAGS_max_graph_tokens);
  cf.quant_gemm_max_rows = absl::GetFlag(FLAGS_quant_gemm_max_rows);
  cf.kv_dtype = bo.model.kv_dtype;
  cf.cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
  cf.device_sampling = absl::GetFlag(FLAGS_device_sampling);
  cf.collective_timeout_s = absl::GetFlag(FLAGS_collective_timeout_s);
  NullBackendOptions& no = o->null_backend;
  no.block_size = bo.block_size;
  no.num_kv_blocks = bo.num_kv_blocks;
  no.kv_memory_bytes = bo.kv_memory_bytes;
  no.kv_dtype = bo.model.kv_dtype;
  no.rank = bo.rank;
  no.world_size = bo.world_size;
  no.step_time = absl::Milliseconds(absl::GetFlag(FLAGS_null_step_ms));
  no.eos_probability = absl::GetFlag(FLAGS_null_eos_probability);
  no.device_sampling = absl::GetFlag(FLAGS_device_sampling);
  return cf.Validate();
}

absl::Status ClientFromFlags(WorkerClientOptions* co) {
  co->scheduler_address = absl::GetFlag(FLAGS_scheduler);
  if (const double g = absl::GetFlag(FLAGS_give_up_after_s); g > 0) {
    co->give_up_after = absl::Seconds(g);
  }
  co->tls.cert = absl::GetFlag(FLAGS_worker_tls_cert);
  co->tls.key = absl::GetFlag(FLAGS_worker_tls_key);
  co->tls.ca = absl::GetFlag(FLAGS_worker_tls_ca);
  co->tls.server_name = absl::GetFlag(FLAGS_worker_tls_server_name);
  if (co->tls.enabled() && (co->tls.cert.empty() || co->tls.key.empty() || co->tls.ca.empty())) {
    return absl::InvalidArgumentError(
        "the attach port's TLS is mutual: give --worker_tls_cert, --worker_tls_key and "
        "--worker_tls_ca together");
  }
  return co->Validate();
}

}  // namespace

absl::StatusOr<WorkerBinaryOptions> OptionsFromFlags(int hardware_threads) {
  WorkerBinaryOptions o;
  absl::StatusOr<BackendKind> backend = ParseBackend(absl::GetFlag(FLAGS_backend));
  if (!backend.ok()) return backend.status();
  o.backend = *backend;
  o.model_path = absl::GetFlag(FLAGS_model);
  if (o.model_path.empty()) return absl::InvalidArgumentError("--model is required");
  o.executor.replica = absl::GetFlag(FLAGS_replica);
  o.executor.rank = absl::GetFlag(FLAGS_rank);
  o.executor.world_size = absl::GetFlag(FLAGS_world_size);
  if (absl::Status s = o.executor.Validate(); !s.ok()) return s;
  if (absl::Status s = CpuFromFlags(o.executor, hardware_threads, &o.cpu); !s.ok()) return s;
  if (absl::Status s = OtherBackendsFromFlags(&o); !s.ok()) return s;
  if (absl::Status s = ClientFromFlags(&o.client); !s.ok()) return s;
  o.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  o.ports_file = absl::GetFlag(FLAGS_ports_file);
  o.drain_timeout = absl::Seconds(std::max(0.0, absl::GetFlag(FLAGS_drain_timeout_s)));
  return o;
}

}  // namespace weft

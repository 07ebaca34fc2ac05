// weft-worker's command line: its flags (defined in worker_flags.cc) and
// OptionsFromFlags, which turns them into the options of every part of the binary — the
// executor (replica, rank), the chosen backend's options (cpu, cuda, or null, each
// given the same KV pool and rank flags), the attach client (address, TLS), the probes
// and the shutdown bound — checked before the model loads (a bad flag exits 2 at once,
// not after a long load). main (worker_main.cc) only wires them.
// Thread-safety: call from main's thread (reads the flags).
#ifndef WEFT_WORKER_SERVICE_WORKER_FLAGS_H_
#define WEFT_WORKER_SERVICE_WORKER_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/backends/cpu_backend.h"
#include "worker/backends/cuda_factory.h"
#include "worker/backends/null_backend.h"
#include "worker/service/model_executor.h"
#include "worker/service/worker_client.h"

namespace weft {

enum class BackendKind { kCpu, kCuda, kNull };

struct WorkerBinaryOptions {
  std::string model_path;
  BackendKind backend = BackendKind::kCpu;
  ModelExecutorOptions executor;
  CpuBackendOptions cpu;          // also the KV pool and rank flags the others copy
  CudaBackendFlags cuda;          // --backend=cuda
  NullBackendOptions null_backend;  // --backend=null
  WorkerClientOptions client;
  int metrics_port = -1;  // -1: off
  std::string ports_file;
  absl::Duration drain_timeout;  // zero: no bound
};

// The flags' values as options; INVALID_ARGUMENT naming the flag for a bad one (exit 2).
// `hardware_threads`: the cores --threads=0 divides among the replica's ranks.
absl::StatusOr<WorkerBinaryOptions> OptionsFromFlags(int hardware_threads);

}  // namespace weft

#endif  // WEFT_WORKER_SERVICE_WORKER_FLAGS_H_

// weft-worker: one rank of a replica. Loads the model (its shard), sizes its paged KV
// pool, attaches to the scheduler's worker port and executes the plans it streams.
//
//   weft-worker --scheduler=127.0.0.1:50052 --model=models/X.gguf [--replica=r0
//               --rank=0 --world_size=1 --threads=N --kernels=auto --block_size=16
//               --kv_memory_bytes=1073741824 | --num_kv_blocks=N] [--metrics_port=-1|0|P
//               --ports_file=FILE] [--kv_dtype=f16|bf16|int8|f32 --collective_timeout_s=10]
//               [--backend=cuda --cuda_device=-1 --cuda_graphs --device_sampling]
//               [--worker_tls_cert --worker_tls_key --worker_tls_ca --worker_tls_server_name]
//               [--backend=null --null_step_ms=0 --null_eos_probability=0]
// --backend=null does no model arithmetic (worker/backends/null_backend.h: deterministic
// tokens from the plan, optional fixed step time): for measuring the CPU path of a step.
// HTTP (--metrics_port, common/metrics_http.h), up before the model loads:
//   /livez    200 from process start (liveness never kills a loading worker)
//   /startupz 200 once the model is loaded and the KV pool allocated, 503 before
//   /readyz   200 while admitted to a replica of a scheduler and not draining, else 503
//   /metrics  weft_worker_* (registered once the model is loaded)
// With --ports_file the bound metrics port (-1 when off) is written there as JSON
// {"metrics_port": N} when /startupz turns 200 (tests and launchers use port 0).
// --world_size > 1: the ranks of a replica form their group when the scheduler admits
// it (shared memory on CPU; NCCL with --backend=cuda, which needs a --config=cuda build,
// see worker/backends/cuda_factory.h). On CPU a rank first removes the /dev/shm segments
// of groups whose creator died on this host (provably stale ones only).
// It retries the attach with backoff until the scheduler is there (a worker may start
// first).
// SIGTERM/SIGINT: while loading or not attached, exit 0 at once. Attached: /readyz turns
// 503 and the scheduler drains the replica (every rank; running sequences finish, up to
// the scheduler's --worker_drain_timeout_s, the rest re-queued elsewhere with their
// tokens); the worker exits 0 when the scheduler releases it — or at a second signal,
// or after --drain_timeout_s.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/gguf.h"
#include "common/model_config.h"
#include "common/metrics_http.h"
#include "common/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "glog/logging.h"
#include "worker/backends/cpu_backend.h"
#include "worker/backends/cuda_factory.h"
#include "worker/backends/null_backend.h"
#include "worker/comm/shm_communicator.h"
#include "worker/model/linear.h"
#include "worker/service/model_executor.h"
#include "worker/service/worker_client.h"

ABSL_FLAG(std::string, scheduler, "127.0.0.1:50052", "host:port of the scheduler's worker port");
ABSL_FLAG(std::string, model, "", "GGUF model file (required)");
ABSL_FLAG(std::string, replica, "replica-0", "replica (tensor-parallel group) name");
ABSL_FLAG(int32_t, rank, 0, "this process's rank in its replica");
ABSL_FLAG(int32_t, world_size, 1, "ranks in the replica (tensor-parallel size)");
ABSL_FLAG(std::string, backend, "cpu", "cpu | cuda | null (no model arithmetic)");
ABSL_FLAG(std::string, kernels, "auto",
          "CPU kernels: auto | avx512vnni | avx2 | reference | avx512 | packed (auto: the fastest "
          "this CPU runs; avx512/packed are fp32 paths)");
ABSL_FLAG(std::string, kv_dtype, "f16",
          "KV cache element type: f16 (default, as llama.cpp) | bf16 | int8 (groups of 8, fp16 "
          "scales) | f32");
ABSL_FLAG(int32_t, threads, 0, "compute threads (0: the cores divided by --world_size)");
ABSL_FLAG(int32_t, block_size, 16, "KV block size in tokens (must equal the scheduler's)");
ABSL_FLAG(int32_t, num_kv_blocks, 0, "KV blocks (0: as many as --kv_memory_bytes holds)");
ABSL_FLAG(int64_t, kv_memory_bytes, int64_t{1} << 30, "KV pool budget in bytes");
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

// Times and counts every step of the wrapped executor for /metrics.
class MeteredExecutor : public StepExecutor {
 public:
  MeteredExecutor(StepExecutor* inner, const Backend* backend, prometheus::Registry* r,
                  int32_t kv_blocks)
      : inner_(inner),
        backend_(backend),
        collective_seconds_(prometheus::BuildCounter().Name("weft_worker_collective_seconds_total")
                                .Help("Seconds spent in tensor-parallel collectives (all-reduce, "
                                      "all-gather) inside steps.")
                                .Register(*r).Add({})),
        steps_(prometheus::BuildCounter().Name("weft_worker_steps_total")
                   .Help("Plans executed.").Register(*r).Add({})),
        plans_received_(prometheus::BuildCounter().Name("weft_worker_plans_received_total")
                            .Help("Plans received, counted before they run (one more than "
                                  "weft_worker_steps_total while a step runs).")
                            .Register(*r).Add({})),
        errors_(prometheus::BuildCounter().Name("weft_worker_step_errors_total")
                    .Help("Plans that failed (reported to the scheduler).").Register(*r).Add({})),
        tokens_(prometheus::BuildCounter().Name("weft_worker_sampled_tokens_total")
                    .Help("Tokens sampled.").Register(*r).Add({})),
        attached_(prometheus::BuildGauge().Name("weft_worker_attached")
                      .Help("1 while attached to a scheduler.").Register(*r).Add({})),
        attachments_(prometheus::BuildCounter().Name("weft_worker_attachments_total")
                         .Help("Times this rank was admitted (welcomed) by a scheduler.")
                         .Register(*r).Add({})),
        step_seconds_(prometheus::BuildHistogram().Name("weft_worker_step_seconds")
                          .Help("Time to execute one plan.").Register(*r)
                          .Add({}, prometheus::Histogram::BucketBoundaries{
                                       .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5})) {
    prometheus::BuildGauge().Name("weft_worker_kv_blocks").Help("KV blocks in this rank's pool.")
        .Register(*r).Add({}).Set(kv_blocks);
  }
  weft::v1::WorkerHello Hello() override { return inner_->Hello(); }
  absl::Status OnWelcome(const weft::v1::Welcome& w) override {
    absl::Status s = inner_->OnWelcome(w);
    if (s.ok()) {
      attached_.Set(1);
      attachments_.Increment();
    }
    return s;
  }
  weft::v1::StepResult Execute(const weft::v1::StepPlan& plan) override {
    weft::v1::StepResult r;
    ExecuteInto(plan, &r);
    return r;
  }
  void ExecuteInto(const weft::v1::StepPlan& plan, weft::v1::StepResult* result) override {
    plans_received_.Increment();
    inner_->ExecuteInto(plan, result);
    const weft::v1::StepResult& r = *result;
    steps_.Increment();
    if (!r.error().empty()) errors_.Increment();
    tokens_.Increment(r.tokens_size());
    step_seconds_.Observe(r.execute_seconds());
    const double c = backend_->collective_seconds();
    if (c > last_collective_) collective_seconds_.Increment(c - last_collective_);
    last_collective_ = c;
  }
  void OnDetach() override {
    attached_.Set(0);
    inner_->OnDetach();
  }

 private:
  StepExecutor* inner_;
  const Backend* backend_;
  prometheus::Counter& collective_seconds_;
  double last_collective_ = 0;
  prometheus::Counter& steps_;
  prometheus::Counter& plans_received_;
  prometheus::Counter& errors_;
  prometheus::Counter& tokens_;
  prometheus::Gauge& attached_;
  prometheus::Counter& attachments_;
  prometheus::Histogram& step_seconds_;
};

// Takes SIGTERM/SIGINT (blocked in every thread by main) on its own thread and turns
// them into the worker's shutdown: before a client is published (loading), exit 0 at
// once; then a drain request (a plain stop when not attached); then, at a second signal
// or after `drain_bound`, a stop.
// Thread-safety: Publish from the main thread; the destructor joins the watcher.
class ShutdownWatcher {
 public:
  explicit ShutdownWatcher(absl::Duration drain_bound)
      : drain_bound_(drain_bound), thread_([this] { Watch(); }) {}
  ~ShutdownWatcher() {
    done_ = true;
    thread_.join();
  }
  // From now on a signal drains (then stops) `client`, which must outlive this object.
  void Publish(WorkerClient* client) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    client_ = client;
  }

 private:
  // The next SIGTERM/SIGINT, or 0 once `deadline` passed or the watcher is stopping.
  int WaitSignal(absl::Time deadline) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    while (!done_ && absl::Now() < deadline) {
      const timespec poll = {0, 100 * 1000 * 1000};  // to see done_ and the deadline
      const int sig = sigtimedwait(&set, nullptr, &poll);
      if (sig > 0) return sig;
    }
    return 0;
  }
  void Watch() {
    int sig = WaitSignal(absl::InfiniteFuture());
    if (sig == 0) return;
    WorkerClient* client = nullptr;
    {
      MutexLock lock(&mu_);
      client = client_;
      if (client == nullptr) {
        LOG(INFO) << "signal " << sig << " before the worker serves (loading): exiting";
        _exit(0);
      }
    }
    if (!client->RequestDrain(absl::StrCat("signal ", sig))) {
      LOG(INFO) << "signal " << sig << ": not attached, stopping";
      client->Stop();
      return;
    }
    LOG(INFO) << "signal " << sig << ": draining the replica (a second signal stops at once)";
    const absl::Time bound = drain_bound_ > absl::ZeroDuration() ? absl::Now() + drain_bound_
                                                                 : absl::InfiniteFuture();
    sig = WaitSignal(bound);
    if (done_) return;
    LOG(WARNING) << (sig != 0 ? absl::StrCat("signal ", sig) : std::string("--drain_timeout_s"))
                 << ": stopping without waiting for the drain to finish";
    client->Stop();
  }

  const absl::Duration drain_bound_;
  std::atomic<bool> done_{false};
  Mutex mu_;
  WorkerClient* client_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::thread thread_;  // last: starts once the members above exist
};

int Main() {
  const std::string backend_name = absl::GetFlag(FLAGS_backend);
  const bool cuda = backend_name == "cuda";
  const bool null = backend_name == "null";
  if (cuda && !CudaBackendAvailable()) {
    LOG(ERROR) << "--backend=cuda: this weft-worker was built without CUDA; build it with "
                  "`bazel build --config=cuda //worker/service:weft-worker` or use --backend=cpu";
    return 2;
  }
  if (!cuda && !null && backend_name != "cpu") {
    LOG(ERROR) << "--backend must be cpu, cuda or null, got '" << backend_name << "'";
    return 2;
  }
  const std::string model_path = absl::GetFlag(FLAGS_model);
  if (model_path.empty()) {
    LOG(ERROR) << "--model is required";
    return 2;
  }
  auto kernels = ParseKernelChoice(absl::GetFlag(FLAGS_kernels));
  if (!kernels.ok()) {
    LOG(ERROR) << kernels.status().message();
    return 2;
  }
  ModelExecutorOptions eo;
  eo.replica = absl::GetFlag(FLAGS_replica);
  eo.rank = absl::GetFlag(FLAGS_rank);
  eo.world_size = absl::GetFlag(FLAGS_world_size);
  CpuBackendOptions bo;
  bo.block_size = absl::GetFlag(FLAGS_block_size);
  bo.num_kv_blocks = absl::GetFlag(FLAGS_num_kv_blocks);
  bo.kv_memory_bytes = absl::GetFlag(FLAGS_kv_memory_bytes);
  bo.model.kernels = *kernels;
  {
    auto kv_dtype = ParseKvDtype(absl::GetFlag(FLAGS_kv_dtype));  // every backend's
    if (!kv_dtype.ok()) {
      LOG(ERROR) << kv_dtype.status().message();
      return 2;
    }
    bo.model.kv_dtype = *kv_dtype;
  }
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads <= 0) {
    const int cores = std::max(1u, std::thread::hardware_concurrency());
    threads = std::max(1, cores / std::max(1, eo.world_size));
  }
  bo.model.num_threads = threads;
  bo.rank = eo.rank;
  bo.world_size = eo.world_size;
  bo.collective_timeout = absl::Seconds(absl::GetFlag(FLAGS_collective_timeout_s));
  if (absl::Status s = eo.Validate(); !s.ok()) {
    LOG(ERROR) << "bad flags: " << s.message();
    return 2;
  }
  if (absl::Status s = bo.Validate(); !s.ok()) {
    LOG(ERROR) << "bad flags: " << s.message();
    return 2;
  }

  // The attach options are checked before the (possibly long) model load.
  WorkerClientOptions co;
  co.scheduler_address = absl::GetFlag(FLAGS_scheduler);
  if (const double g = absl::GetFlag(FLAGS_give_up_after_s); g > 0) co.give_up_after = absl::Seconds(g);
  co.tls.cert = absl::GetFlag(FLAGS_worker_tls_cert);
  co.tls.key = absl::GetFlag(FLAGS_worker_tls_key);
  co.tls.ca = absl::GetFlag(FLAGS_worker_tls_ca);
  co.tls.server_name = absl::GetFlag(FLAGS_worker_tls_server_name);
  if (co.tls.enabled() && (co.tls.cert.empty() || co.tls.key.empty() || co.tls.ca.empty())) {
    LOG(ERROR) << "the attach port's TLS is mutual: give --worker_tls_cert, --worker_tls_key and "
                  "--worker_tls_ca together";
    return 2;
  }
  if (absl::Status s = co.Validate(); !s.ok()) {
    LOG(ERROR) << "bad flags: " << s.message();
    return 2;
  }

  // The file's header and its model description (metadata and tensor table only, no
  // weight pages): an architecture or file this worker would refuse is refused before
  // any port opens, naming what is wrong.
  auto file = GgufFile::Open(model_path);
  if (!file.ok()) {
    LOG(ERROR) << "cannot load the model: " << file.status().message();
    return 1;
  }
  if (absl::StatusOr<ModelConfig> config = ModelConfig::FromGguf(**file); !config.ok()) {
    LOG(ERROR) << "cannot serve " << model_path << ": " << config.status().message();
    return 1;
  }

  // Probes and /metrics next: liveness answers while the model loads. The objects the
  // server's callbacks read are declared before it (destroyed after it).
  auto registry = std::make_shared<prometheus::Registry>();
  std::atomic<bool> started{false};
  std::unique_ptr<WorkerClient> client;
  std::atomic<WorkerClient*> serving{nullptr};
  std::unique_ptr<MetricsHttp> metrics_http;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    MetricsHttpOptions ho;
    ho.port = absl::GetFlag(FLAGS_metrics_port);
    ho.registry = registry;
    ho.started = [&started] { return started.load(); };
    ho.ready = [&serving] {
      WorkerClient* c = serving.load();
      return c != nullptr && c->ready();
    };
    auto m = MetricsHttp::Start(std::move(ho));
    if (!m.ok()) {
      LOG(ERROR) << m.status().message();
      return 1;
    }
    metrics_http = std::move(*m);
  }
  ShutdownWatcher watcher(absl::Seconds(absl::GetFlag(FLAGS_drain_timeout_s)));

  if (!cuda && !null && eo.world_size > 1) {
    // Groups whose creator died on this host (a SIGKILLed or OOM-killed rank 0) leave
    // their shared-memory segments behind; only provably dead ones are removed.
    absl::StatusOr<int> removed = ShmCommunicator::RemoveStaleSegments();
    if (!removed.ok()) {
      LOG(WARNING) << "cleaning stale tensor-parallel segments: " << removed.status();
    } else if (*removed > 0) {
      LOG(INFO) << "removed " << *removed << " stale tensor-parallel segment(s) from /dev/shm";
    }
  }
  LOG(INFO) << "loading " << model_path;
  absl::StatusOr<std::unique_ptr<Backend>> backend;
  if (cuda) {
    CudaBackendFlags cf;
    cf.rank = eo.rank;
    cf.world_size = eo.world_size;
    cf.device = absl::GetFlag(FLAGS_cuda_device);
    cf.block_size = bo.block_size;
    cf.num_kv_blocks = bo.num_kv_blocks;
    cf.kv_memory_bytes = bo.kv_memory_bytes;
    cf.kv_dtype = bo.model.kv_dtype;
    cf.cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
    cf.device_sampling = absl::GetFlag(FLAGS_device_sampling);
    cf.collective_timeout_s = absl::GetFlag(FLAGS_collective_timeout_s);
    backend = MakeCudaBackend(**file, cf);
  } else if (null) {
    NullBackendOptions no;
    no.block_size = bo.block_size;
    no.num_kv_blocks = bo.num_kv_blocks;
    no.kv_memory_bytes = bo.kv_memory_bytes;
    no.kv_dtype = bo.model.kv_dtype;
    no.rank = eo.rank;
    no.world_size = eo.world_size;
    no.step_time = absl::Milliseconds(absl::GetFlag(FLAGS_null_step_ms));
    no.eos_probability = absl::GetFlag(FLAGS_null_eos_probability);
    no.device_sampling = absl::GetFlag(FLAGS_device_sampling);
    auto nb = NullBackend::Create(**file, no);
    if (nb.ok()) {
      backend = std::unique_ptr<Backend>(std::move(*nb));
    } else {
      backend = nb.status();
    }
  } else {
    auto cpu = CpuBackend::Create(**file, bo);
    if (cpu.ok()) {
      backend = std::unique_ptr<Backend>(std::move(*cpu));
    } else {
      backend = cpu.status();
    }
  }
  if (!backend.ok()) {
    LOG(ERROR) << "cannot start the model: " << backend.status().message();
    return 1;
  }
  auto exec = ModelExecutor::Create(**file, std::move(*backend), eo);
  if (!exec.ok()) {
    LOG(ERROR) << "cannot start the model: " << exec.status().message();
    return 1;
  }

  MeteredExecutor metered(exec->get(), &(*exec)->backend(), registry.get(), (*exec)->num_kv_blocks());
  started = true;  // model loaded, KV pool allocated
  if (const std::string pf = absl::GetFlag(FLAGS_ports_file); !pf.empty()) {
    // Written whole, then renamed: a reader never sees a partial file.
    std::ofstream(pf + ".tmp") << "{\"metrics_port\": " << (metrics_http ? metrics_http->port() : -1)
                               << "}\n";
    if (std::rename((pf + ".tmp").c_str(), pf.c_str()) != 0) {
      LOG(ERROR) << "cannot write --ports_file " << pf;
      return 1;
    }
  }

  client = std::make_unique<WorkerClient>(co, &metered);
  serving = client.get();
  watcher.Publish(client.get());
  absl::Status s = client->Run();
  if (!s.ok()) {
    LOG(ERROR) << "worker ended: " << s;
    return 1;
  }
  LOG(INFO) << "worker stopped (" << client->steps_executed() << " steps)";
  return 0;
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  weft::ParseFlags(argc, argv, "weft-worker --scheduler=HOST:PORT --model=FILE.gguf [...]");
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  return weft::Main();
}

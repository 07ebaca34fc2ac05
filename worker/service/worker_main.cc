// weft-worker: one rank of a replica. Loads the model (its shard), sizes its paged KV
// pool, attaches to the scheduler's worker port and executes the plans it streams.
//
//   weft-worker --scheduler=127.0.0.1:50052 --model=models/X.gguf [--replica=r0
//               --rank=0 --world_size=1 --threads=N --kernels=auto --block_size=16
//               --kv_memory_bytes=1073741824 | --num_kv_blocks=N] [--metrics_port=-1|0|P
//               --ports_file=FILE] [--kv_dtype=f16|bf16|int8|f32 --collective_timeout_s=10]
//               [--backend=cuda --cuda_device=-1 --cuda_graphs --device_sampling
//                --max_graph_batch=256 --graph_mixed_steps=true --max_graph_tokens=2048]
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
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/gguf.h"
#include "common/model_config.h"
#include "common/metrics_http.h"
#include "common/mutex.h"
#include "common/server_process.h"
#include "glog/logging.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "worker/backends/cpu_backend.h"
#include "worker/backends/cuda_factory.h"
#include "worker/backends/null_backend.h"
#include "worker/comm/shm_communicator.h"
#include "worker/service/model_executor.h"
#include "worker/service/worker_client.h"
#include "worker/service/worker_flags.h"

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
        d2h_bytes_(prometheus::BuildCounter().Name("weft_worker_device_to_host_bytes_total")
                       .Help("Bytes copied from the accelerator to the host (0 without one).")
                       .Register(*r).Add({})),
        h2d_bytes_(prometheus::BuildCounter().Name("weft_worker_host_to_device_bytes_total")
                       .Help("Bytes copied from the host to the accelerator (0 without one).")
                       .Register(*r).Add({})),
        graph_steps_(prometheus::BuildCounter().Name("weft_worker_graph_steps_total")
                         .Help("Forward passes by how they ran: kind=decode_graph (one CUDA "
                               "graph), piecewise (CUDA graphs around eager attention, "
                               "--graph_mixed_steps), eager (0 on backends without graphs).")
                         .Register(*r)),
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
    graph_kinds_[0] = &graph_steps_.Add({{"kind", "decode_graph"}});
    graph_kinds_[1] = &graph_steps_.Add({{"kind", "piecewise"}});
    graph_kinds_[2] = &graph_steps_.Add({{"kind", "eager"}});
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
    const int64_t d2h = backend_->device_to_host_bytes();
    const int64_t h2d = backend_->host_to_device_bytes();
    if (d2h > last_d2h_) d2h_bytes_.Increment(static_cast<double>(d2h - last_d2h_));
    if (h2d > last_h2d_) h2d_bytes_.Increment(static_cast<double>(h2d - last_h2d_));
    last_d2h_ = d2h;
    last_h2d_ = h2d;
    const Backend::GraphStepCounts g = backend_->graph_steps();
    const int64_t now[3] = {g.decode_graph, g.piecewise, g.eager};
    for (int k = 0; k < 3; ++k) {
      if (now[k] > last_graph_steps_[k]) {
        graph_kinds_[k]->Increment(static_cast<double>(now[k] - last_graph_steps_[k]));
      }
      last_graph_steps_[k] = now[k];
    }
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
  prometheus::Counter& d2h_bytes_;
  prometheus::Counter& h2d_bytes_;
  int64_t last_d2h_ = 0, last_h2d_ = 0;
  prometheus::Family<prometheus::Counter>& graph_steps_;
  prometheus::Counter* graph_kinds_[3] = {};  // decode_graph, piecewise, eager
  int64_t last_graph_steps_[3] = {};
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
    while (!done_ && absl::Now() < deadline) {
      // In slices, to see done_ and the deadline.
      const int sig = WaitForStopSignal(std::min(absl::Milliseconds(100), deadline - absl::Now()));
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

template <typename B>
absl::StatusOr<std::unique_ptr<Backend>> AsBackend(absl::StatusOr<std::unique_ptr<B>> b) {
  if (!b.ok()) return b.status();
  return std::unique_ptr<Backend>(std::move(*b));
}

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const GgufFile& file,
                                                     const WorkerBinaryOptions& o) {
  switch (o.backend) {
    case BackendKind::kCuda:
      return MakeCudaBackend(file, o.cuda);
    case BackendKind::kNull:
      return AsBackend(NullBackend::Create(file, o.null_backend));
    case BackendKind::kCpu:
      break;
  }
  if (o.executor.world_size > 1) {
    // Groups whose creator died on this host (a SIGKILLed or OOM-killed rank 0) leave
    // their shared-memory segments behind; only provably dead ones are removed.
    absl::StatusOr<int> removed = ShmCommunicator::RemoveStaleSegments();
    if (!removed.ok()) {
      LOG(WARNING) << "cleaning stale tensor-parallel segments: " << removed.status();
    } else if (*removed > 0) {
      LOG(INFO) << "removed " << *removed << " stale tensor-parallel segment(s) from /dev/shm";
    }
  }
  return AsBackend(CpuBackend::Create(file, o.cpu));
}

// Probes and /metrics, up before the model loads: liveness answers while it loads.
absl::StatusOr<std::unique_ptr<MetricsHttp>> StartMetrics(
    const WorkerBinaryOptions& o, std::shared_ptr<prometheus::Registry> registry,
    const std::atomic<bool>* started, const std::atomic<WorkerClient*>* serving) {
  if (o.metrics_port < 0) return nullptr;
  MetricsHttpOptions ho;
  ho.port = o.metrics_port;
  ho.registry = std::move(registry);
  ho.started = [started] { return started->load(); };
  ho.ready = [serving] {
    WorkerClient* c = serving->load();
    return c != nullptr && c->ready();
  };
  return MetricsHttp::Start(std::move(ho));
}

// Written whole, then renamed: a reader never sees a partial file.
bool WritePortsFile(const std::string& path, int metrics_port) {
  if (path.empty()) return true;
  std::ofstream(path + ".tmp") << "{\"metrics_port\": " << metrics_port << "}\n";
  return std::rename((path + ".tmp").c_str(), path.c_str()) == 0;
}

int Main() {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  absl::StatusOr<WorkerBinaryOptions> o = OptionsFromFlags(cores);
  if (!o.ok()) {
    LOG(ERROR) << "bad flags: " << o.status().message();
    return 2;
  }
  // The file's header and its model description (metadata and tensor table only, no
  // weight pages): an architecture or file this worker would refuse is refused before
  // any port opens, naming what is wrong.
  auto file = GgufFile::Open(o->model_path);
  if (!file.ok()) {
    LOG(ERROR) << "cannot load the model: " << file.status().message();
    return 1;
  }
  if (absl::StatusOr<ModelConfig> config = ModelConfig::FromGguf(**file); !config.ok()) {
    LOG(ERROR) << "cannot serve " << o->model_path << ": " << config.status().message();
    return 1;
  }
  // The objects the probes' callbacks read are declared before their server.
  auto registry = std::make_shared<prometheus::Registry>();
  std::atomic<bool> started{false};
  std::unique_ptr<WorkerClient> client;
  std::atomic<WorkerClient*> serving{nullptr};
  auto metrics_http = StartMetrics(*o, registry, &started, &serving);
  if (!metrics_http.ok()) {
    LOG(ERROR) << metrics_http.status().message();
    return 1;
  }
  ShutdownWatcher watcher(o->drain_timeout);

  LOG(INFO) << "loading " << o->model_path;
  absl::StatusOr<std::unique_ptr<Backend>> backend = MakeBackend(**file, *o);
  if (!backend.ok()) {
    LOG(ERROR) << "cannot start the model: " << backend.status().message();
    return 1;
  }
  auto exec = ModelExecutor::Create(**file, std::move(*backend), o->executor);
  if (!exec.ok()) {
    LOG(ERROR) << "cannot start the model: " << exec.status().message();
    return 1;
  }
  MeteredExecutor metered(exec->get(), &(*exec)->backend(), registry.get(),
                          (*exec)->num_kv_blocks());
  started = true;  // model loaded, KV pool allocated
  if (!WritePortsFile(o->ports_file, *metrics_http ? (*metrics_http)->port() : -1)) {
    LOG(ERROR) << "cannot write --ports_file " << o->ports_file;
    return 1;
  }
  client = std::make_unique<WorkerClient>(o->client, &metered);
  serving = client.get();
  watcher.Publish(client.get());
  if (absl::Status s = client->Run(); !s.ok()) {
    LOG(ERROR) << "worker ended: " << s;
    return 1;
  }
  LOG(INFO) << "worker stopped (" << client->steps_executed() << " steps)";
  return 0;
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  weft::InitServerProcess(argc, argv, "weft-worker --scheduler=HOST:PORT --model=FILE.gguf [...]");
  return weft::Main();
}

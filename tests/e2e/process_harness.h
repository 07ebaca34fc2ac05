// Process harness for Weft's end-to-end tests: real weft-scheduler / weft-worker
// processes on loopback, the real model, nothing faked.
//
// What it gives a test:
//  * ChildProcess — fork/exec of a runfiles binary into its own process group with
//    PR_SET_PDEATHSIG(SIGKILL), stdout+stderr to a log file; signals, waits, and a
//    destructor that SIGKILLs the group and reaps it. A test that fails, crashes or is
//    killed by Bazel's timeout never leaves a process behind.
//  * Cluster — one scheduler and any number of workers: single-rank replicas, or
//    tensor-parallel replicas of N ranks (one process per rank, --replica/--rank/
//    --world_size, forming their group over shared memory once admitted); ephemeral
//    ports (read back from each binary's --ports_file), waits for replicas / health with
//    generous hang guards, /metrics scrapes, and log tails for failure messages.
//  * MetricsPage — a parsed Prometheus text page ("name{labels}" -> value), keyed
//    without the scheduler's constant model="..." label (see MetricsPage).
//  * Generate helpers — one blocking stream that records tokens, status and finish.
//
// Tests assert events and counts, never speed: every timeout here is a hang guard.
// "Within N steps" is read from the scheduler's weft_steps_total.
// Thread-safety: ChildProcess and Cluster are used from the test's main thread (the
// death signal is tied to the thread that forked: see ChildProcess::Start); MetricsPage
// is a value; the Generate helpers may run on any thread.
#ifndef WEFT_TESTS_E2E_PROCESS_HARNESS_H_
#define WEFT_TESTS_E2E_PROCESS_HARNESS_H_

#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tls_credentials.h"
#include "grpcpp/grpcpp.h"
#include "weft/v1/generate.grpc.pb.h"

namespace weft::e2e {

// Workspace-relative path of a data dependency -> its runfiles path.
std::string Runfile(const std::string& path);
// A fresh directory under $TEST_TMPDIR (or /tmp). With `keep`, under
// $TEST_UNDECLARED_OUTPUTS_DIR when set, so Bazel keeps it (process logs) in
// bazel-testlogs/<target>/test.outputs.
std::string MakeTempDir(const std::string& prefix, bool keep = false);
// Polls `cond` every `poll` until it holds (true) or `timeout` passes (false).
bool WaitFor(const std::function<bool()>& cond, absl::Duration timeout,
             absl::Duration poll = absl::Milliseconds(50));
// The whole file, or "" when it cannot be read.
std::string ReadFile(const std::string& path);
// Resident memory of process `pid` in KiB (VmRSS of /proc/pid/status), -1 when unreadable.
int64_t RssKib(pid_t pid);
// A loopback TCP port that was free a moment ago, for programs whose ports come from a
// configuration rather than port 0 (HAProxy); -1 when none could be bound.
int FreeLoopbackPort();

class ChildProcess {
 public:
  // Starts argv[0] (a path) with `argv`; stderr goes to `log_path`, and so does stdout
  // unless `stdout_path` is given. The child
  // leads its own process group and gets SIGKILL when the forking *thread* exits
  // (PR_SET_PDEATHSIG), so start processes from the test's main thread.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(std::vector<std::string> argv,
                                                            std::string log_path,
                                                            const std::string& stdout_path = "");
  ~ChildProcess();  // SIGKILL to the group (if still running) and reap
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  // Sends `sig` to the process; false when it has already been reaped.
  bool Signal(int sig);
  // True while the process has not exited (reaps it if it has).
  bool Running();
  // SIGSTOP, then waits (up to `timeout`) until every thread of the process is stopped:
  // from then on it computes and sends nothing (what it had already written to a socket
  // may still arrive). False when it did not stop. Resume() sends SIGCONT. Tests use it
  // to hold a condition ("still generating", "still queued") whatever the machine's speed.
  bool Pause(absl::Duration timeout = absl::Seconds(30));
  bool Resume() { return Signal(SIGCONT); }
  // Waits up to `timeout` for the exit; returns the waitpid status, or nullopt.
  std::optional<int> Wait(absl::Duration timeout);
  // Exit status once exited: the exit code, or 128 + signal number.
  std::optional<int> exit_code() const;
  // The last `max_bytes` of the log.
  std::string LogTail(size_t max_bytes = 3000) const;

 private:
  ChildProcess(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}
  bool Reap(bool block);

  pid_t pid_;
  std::string log_path_;
  std::optional<int> wait_status_;
};

// Pauses a process for a scope (ChildProcess::Pause) and resumes it when the scope ends,
// also when an assertion returns early: a paused process shared by later tests (a suite's
// worker) would otherwise hang them.
class ScopedPause {
 public:
  explicit ScopedPause(ChildProcess* process, absl::Duration timeout = absl::Seconds(30))
      : process_(process), paused_(process->Pause(timeout)) {}
  ~ScopedPause() { Resume(); }
  ScopedPause(const ScopedPause&) = delete;
  ScopedPause& operator=(const ScopedPause&) = delete;
  // Whether every thread was seen stopped.
  bool paused() const { return paused_; }
  void Resume() {
    if (process_ != nullptr) process_->Resume();
    process_ = nullptr;
  }

 private:
  ChildProcess* process_;
  const bool paused_;
};

// Starts a program that listens on `num_ports` loopback ports given on its command line
// (HAProxy: ports from its configuration, not port 0). A port picked free a moment ago
// (FreeLoopbackPort) can be taken by another process before the program binds it; the
// program then exits, and it is started again on fresh ports, up to `attempts` times.
// `argv(ports)` is its command line, `ready(ports)` true once it serves (its own answer
// on one of them: a port that another process holds says nothing). *ports: those used.
absl::StatusOr<std::unique_ptr<ChildProcess>> StartOnFreePorts(
    int num_ports, const std::function<std::vector<std::string>(const std::vector<int>&)>& argv,
    const std::string& log_path, const std::function<bool(const std::vector<int>&)>& ready,
    std::vector<int>* ports, int attempts = 5);

// The shipped proxy (deploy/proxy/haproxy.cfg) run by `haproxy` with `models_cfg` (its
// per-model backends), on free ports through StartOnFreePorts; ready once its admin page
// serves /metrics. Its ports: {gRPC, admin}, or {gRPC, HTTP, admin} with `http`.
struct HaproxyPorts {
  int grpc = 0, http = 0, admin = 0;
};
absl::StatusOr<std::unique_ptr<ChildProcess>> StartShippedHaproxy(const std::string& haproxy,
                                                                 const std::string& models_cfg,
                                                                 bool http,
                                                                 const std::string& log_path,
                                                                 HaproxyPorts* ports);

// A parsed Prometheus text-format page. Series are keyed as printed, except that a
// `model` label is taken out of the key (every weft-scheduler series carries the same
// model="<served name>"; a cluster serves one model) and its values are kept in models():
// tests name series as "weft_steps_total{replica=\"r0\"}" whatever the model is called.
class MetricsPage {
 public:
  static MetricsPage Parse(const std::string& text);
  // The values of the `model` label seen on the page, and how many series carried one.
  const std::set<std::string>& models() const { return models_; }
  int model_labelled_series() const { return model_labelled_; }
  int num_series() const { return static_cast<int>(series_.size()); }
  // One series by its exact text, "name" or "name{label=\"v\"}"; `missing` if absent.
  double Get(const std::string& series, double missing = 0) const;
  bool Has(const std::string& series) const { return series_.count(series) > 0; }
  // The sum over every series of metric `name` (all label sets).
  double Sum(const std::string& name) const;
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::map<std::string, double> series_;
  std::set<std::string> models_;
  int model_labelled_ = 0;
};

struct HttpReply {
  int status = 0;
  std::string body;
};
// GET http://127.0.0.1:port<path> (HTTP/1.0, read to the end; 10 s hang guard).
absl::StatusOr<HttpReply> HttpGet(int port, const std::string& path);
// Its status code, or -1 when nothing answered.
int HttpStatus(int port, const std::string& path);
// GET http://127.0.0.1:port/metrics (UNAVAILABLE unless 200).
absl::StatusOr<MetricsPage> ScrapeMetrics(int port);

struct WorkerSpec {
  std::string replica = "r0";
  // Tensor parallelism: this process is rank `rank` of a replica of `world_size` ranks.
  int rank = 0;
  int world_size = 1;
  int num_kv_blocks = 64;  // small pools keep tests quick and make leaks visible
  int threads = 1;
  // The GGUF this worker loads; empty: the cluster's model.
  std::string model_path;
  std::vector<std::string> extra_flags;
};

class Cluster {
 public:
  // `model_path`: the GGUF both binaries load.
  explicit Cluster(std::string model_path);
  // Workers get SIGTERM and up to 5 s to exit, then whatever still runs is SIGKILLed
  // (ChildProcess destructors).
  ~Cluster();

  // Starts weft-scheduler on 127.0.0.1 with ephemeral ports (or `worker_port`, to
  // restart a scheduler where its workers dial) and waits for its --ports_file.
  absl::Status StartScheduler(std::vector<std::string> extra_flags = {}, int worker_port = 0);
  // Starts one weft-worker: rank `spec.rank` of `spec.replica` (replacing a previous
  // process of that replica and rank), and waits for its --ports_file (model loaded,
  // metrics bound). It attaches by itself; use WaitReplicas to wait for admission.
  absl::Status StartWorker(const WorkerSpec& spec);
  // Starts every rank 0..spec.world_size-1 of a replica (spec.rank is ignored), one
  // process each, all started before any is waited for: the ranks load concurrently.
  absl::Status StartReplica(const WorkerSpec& spec);

  ChildProcess* scheduler() { return scheduler_.get(); }
  // The process of `rank` of `replica`, or nullptr.
  ChildProcess* worker(const std::string& replica, int rank = 0);
  std::string address() const;  // 127.0.0.1:<public port>
  int port() const { return port_; }
  int worker_port() const { return worker_port_; }
  int metrics_port() const { return metrics_port_; }
  // The OpenAI HTTP API's port (the scheduler started with --http_port), else -1.
  int http_port() const { return http_port_; }
  int worker_metrics_port(const std::string& replica, int rank = 0) const;

  absl::StatusOr<MetricsPage> Metrics() const { return ScrapeMetrics(metrics_port_); }
  absl::StatusOr<MetricsPage> WorkerMetrics(const std::string& replica, int rank = 0) const;
  // A scheduler gauge/counter by exact series; NaN when the scrape fails.
  double Metric(const std::string& series) const;
  // Sum of weft_steps_total over all replicas (NaN when the scrape fails).
  double Steps() const;

  // Waits until weft_replicas == n.
  absl::Status WaitReplicas(int n, absl::Duration timeout = absl::Seconds(120));
  // Waits until the worker of `replica` has read its Welcome: weft_worker_attached 1 with
  // `attachments` attachments in all (the scheduler counts a replica when it sends the
  // Welcome, so WaitReplicas can return before this). An error says what was seen.
  absl::Status WaitWorkerAttached(const std::string& replica, double attachments,
                                  absl::Duration timeout = absl::Seconds(30));
  // Waits until the worker of `replica` has sampled more than `before` tokens in all
  // (weft_worker_sampled_tokens_total): it is generating for the streams just started.
  absl::Status WaitWorkerSampledMore(const std::string& replica, double before,
                                     absl::Duration timeout = absl::Seconds(120));
  // grpc.health.v1 Check on the public port: "SERVING", "NOT_SERVING", or the error.
  std::string Health() const;

  // The public port speaks TLS (--tls_cert ...): every channel made after this (the
  // stub, Health, NewChannel) dials it with `tls`. Call before StartScheduler.
  void SetClientTls(ClientTlsFiles tls) { client_tls_ = std::move(tls); }
  std::shared_ptr<grpc::Channel> NewChannel(const grpc::ChannelArguments& args = {}) const;
  weft::v1::Generation::Stub* stub();

  // Log tails of every process, for assertion messages.
  std::string Logs() const;
  const std::string& dir() const { return dir_; }
  const std::string& model_path() const { return model_path_; }

 private:
  // "replica" for rank 0, "replica/rank" otherwise (also the log-tail label).
  static std::string WorkerKey(const std::string& replica, int rank);
  // Forks the worker of `spec` (replacing the old process of its rank); the ports file
  // it will write goes to *ports_file.
  absl::Status SpawnWorker(const WorkerSpec& spec, std::string* ports_file);
  // Waits for the ports file of a spawned worker and records its metrics port.
  absl::Status AwaitWorker(const WorkerSpec& spec, const std::string& ports_file);

  const std::string model_path_;
  const std::string dir_;
  ClientTlsFiles client_tls_;
  int restarts_ = 0;
  std::unique_ptr<ChildProcess> scheduler_;
  int port_ = 0, worker_port_ = 0, metrics_port_ = 0, http_port_ = -1;
  std::map<std::string, std::unique_ptr<ChildProcess>> workers_;  // by WorkerKey
  std::map<std::string, int> worker_metrics_ports_;                // by WorkerKey
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<weft::v1::Generation::Stub> stub_;
};

// One Generate call, read to the end.
struct StreamResult {
  grpc::Status status;
  std::vector<int32_t> token_ids;  // sample 0
  std::string text;
  weft::v1::FinishReason finish_reason = weft::v1::FINISH_REASON_UNSPECIFIED;
  int num_messages = 0;
  bool has_usage = false;
  weft::v1::Usage usage;
};

// `on_message` (optional) sees every response; returning false cancels the call.
// `context_setup` (optional) may adjust the context before the call (deadline ...).
StreamResult Generate(weft::v1::Generation::Stub* stub, const weft::v1::GenerateRequest& request,
                      absl::Duration deadline = absl::Seconds(120),
                      const std::function<bool(const weft::v1::GenerateResponse&)>& on_message = {},
                      grpc::ClientContext* context = nullptr);

// A Generate call read on its own thread; the test watches its progress, cancels it
// or joins it. The destructor cancels and joins.
class BackgroundStream {
 public:
  BackgroundStream(weft::v1::Generation::Stub* stub, weft::v1::GenerateRequest request,
                   absl::Duration deadline = absl::Seconds(120));
  ~BackgroundStream();
  BackgroundStream(const BackgroundStream&) = delete;
  BackgroundStream& operator=(const BackgroundStream&) = delete;

  // Tokens of sample 0 received so far.
  int num_tokens() const { return num_tokens_.load(); }
  bool done() const { return done_.load(); }
  // Waits until `n` tokens arrived or the stream ended; true when n arrived.
  bool WaitTokens(int n, absl::Duration timeout = absl::Seconds(60)) const;
  void Cancel() { context_.TryCancel(); }
  // Waits for the end (hang guard `timeout`; then cancels) and returns the result.
  StreamResult Join(absl::Duration timeout = absl::Seconds(120));

 private:
  grpc::ClientContext context_;
  std::atomic<int> num_tokens_{0};
  std::atomic<bool> done_{false};
  StreamResult result_;
  std::thread thread_;
};

// A greedy text request (temperature 0, ignore_eos so the length is max_tokens).
weft::v1::GenerateRequest GreedyRequest(const std::string& prompt, int max_tokens);

// Runs one greedy stream per prompt (max_tokens each), all at once; the token ids of each,
// empty for a stream that did not end OK.
std::vector<std::vector<int32_t>> GreedyOutputs(Cluster& cluster, const std::vector<std::string>& prompts,
                                                int max_tokens);

// A program run to its end: exit code (-1: it did not start or outlived `timeout`), its
// stdout, and its stderr (or the reason it did not start).
struct RunResult {
  int code = -1;
  std::string out;
  std::string log;
};
RunResult RunToEnd(std::vector<std::string> argv, absl::Duration timeout);

// Token ids `weft-generate` prints for `prompt` alone (greedy, ignore_eos); `extra_flags`
// are appended (e.g. "--kernels=packed").
absl::StatusOr<std::vector<int32_t>> ReferenceTokens(const std::string& model_path,
                                                     const std::string& prompt, int max_tokens,
                                                     const std::vector<std::string>& extra_flags = {});

std::string CodeName(grpc::StatusCode code);

// Names of the shared-memory segments in /dev/shm that the CPU tensor-parallel groups of
// `replica` use ("weft-comm-<replica>-e<epoch>"), sorted.
std::vector<std::string> GroupSegments(const std::string& replica);

}  // namespace weft::e2e

#endif  // WEFT_TESTS_E2E_PROCESS_HARNESS_H_

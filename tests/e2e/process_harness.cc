#include "tests/e2e/process_harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace weft::e2e {
namespace {

// {"port": 1, "worker_port": 2, "metrics_port": 3} -> the value of `key`, or -2.
int JsonInt(const std::string& json, const std::string& key) {
  const std::string k = absl::StrCat("\"", key, "\"");
  size_t at = json.find(k);
  if (at == std::string::npos) return -2;
  at = json.find(':', at + k.size());
  if (at == std::string::npos) return -2;
  ++at;
  while (at < json.size() && json[at] == ' ') ++at;
  size_t end = at;
  while (end < json.size() && (json[end] == '-' || std::isdigit(json[end]))) ++end;
  int v = -2;
  return absl::SimpleAtoi(json.substr(at, end - at), &v) ? v : -2;
}

// Waits for `path` to exist while `proc` runs (binaries write it once ready).
absl::StatusOr<std::string> WaitPortsFile(const std::string& path, ChildProcess* proc,
                                          absl::Duration timeout) {
  std::string content;
  const bool ok = WaitFor(
      [&] {
        content = ReadFile(path);
        return !content.empty() || !proc->Running();
      },
      timeout);
  if (!content.empty()) return content;
  if (!ok) return absl::DeadlineExceededError(absl::StrCat("no ", path, " after ", absl::FormatDuration(timeout)));
  return absl::UnavailableError(absl::StrCat("process exited before writing ", path));
}

}  // namespace

std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr || ws == nullptr) return path;  // run by hand from the workspace
  return absl::StrCat(srcdir, "/", ws, "/", path);
}

int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  return ok ? ntohs(a.sin_port) : -1;
}

std::string MakeTempDir(const std::string& prefix, bool keep) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  if (const char* out = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR"); keep && out != nullptr) tmp = out;
  std::string templ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", prefix, "XXXXXX");
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) return tmp != nullptr ? tmp : "/tmp";
  return buf.data();
}

bool WaitFor(const std::function<bool()>& cond, absl::Duration timeout, absl::Duration poll) {
  const absl::Time end = absl::Now() + timeout;
  while (true) {
    if (cond()) return true;
    if (absl::Now() >= end) return false;
    absl::SleepFor(poll);
  }
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int64_t RssKib(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view v = line;
    if (absl::ConsumePrefix(&v, "VmRSS:")) {
      int64_t kib = -1;
      v = absl::StripAsciiWhitespace(absl::StripSuffix(absl::StripAsciiWhitespace(v), "kB"));
      return absl::SimpleAtoi(v, &kib) ? kib : -1;
    }
  }
  return -1;
}

// --- ChildProcess ---------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(std::vector<std::string> argv,
                                                                 std::string log_path,
                                                                 const std::string& stdout_path) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  if (::access(argv[0].c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("not executable: ", argv[0]));
  }
  // Everything the child needs is prepared before fork: after it only async-signal-safe
  // calls (the test process has gRPC threads).
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return absl::InternalError(absl::StrCat("cannot open ", log_path, ": ", std::strerror(errno)));
  int out_fd = log_fd;
  if (!stdout_path.empty()) {
    out_fd = ::open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out_fd < 0) {
      ::close(log_fd);
      return absl::InternalError(absl::StrCat("cannot open ", stdout_path, ": ", std::strerror(errno)));
    }
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    if (out_fd != log_fd) ::close(out_fd);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
    // Default dispositions and an empty mask (the test runner may have blocked some).
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    ::sigaction(SIGPIPE, &dfl, nullptr);  // exec keeps an ignored signal ignored
    ::dup2(out_fd, 1);
    ::dup2(log_fd, 2);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(log_fd);
  if (out_fd != log_fd) ::close(out_fd);
  ::setpgid(pid, pid);  // also from the parent: no window where it is in our group
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, std::move(log_path)));
}

ChildProcess::~ChildProcess() {
  // Only while the leader is unreaped: its pid (and so the group id) cannot have been
  // reused by an unrelated process. The binaries start no processes of their own.
  if (!wait_status_.has_value()) {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    Reap(/*block=*/true);
  }
}

bool ChildProcess::Reap(bool block) {
  if (wait_status_.has_value()) return true;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    wait_status_ = status;
    return true;
  }
  return false;
}

bool ChildProcess::Signal(int sig) {
  if (wait_status_.has_value()) return false;
  return ::kill(pid_, sig) == 0;
}

bool ChildProcess::Running() { return !Reap(/*block=*/false); }

namespace {

// True when every thread of `pid` is stopped (state T or t in /proc/pid/task/*/stat).
bool AllThreadsStopped(pid_t pid) {
  const std::string dir = absl::StrCat("/proc/", pid, "/task");
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return false;
  int threads = 0, stopped = 0;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    ++threads;
    const std::string stat = ReadFile(absl::StrCat(dir, "/", e->d_name, "/stat"));
    // "tid (comm) S ...": the name may hold spaces and parentheses; the state follows
    // the last ')'.
    const size_t close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() &&
        (stat[close + 2] == 'T' || stat[close + 2] == 't')) {
      ++stopped;
    }
  }
  ::closedir(d);
  return threads > 0 && stopped == threads;
}

}  // namespace

bool ChildProcess::Pause(absl::Duration timeout) {
  if (!Signal(SIGSTOP)) return false;
  return WaitFor([this] { return AllThreadsStopped(pid_); }, timeout, absl::Milliseconds(1));
}

std::optional<int> ChildProcess::Wait(absl::Duration timeout) {
  WaitFor([this] { return Reap(false); }, timeout, absl::Milliseconds(20));
  return wait_status_;
}

std::optional<int> ChildProcess::exit_code() const {
  if (!wait_status_.has_value()) return std::nullopt;
  const int s = *wait_status_;
  if (WIFEXITED(s)) return WEXITSTATUS(s);
  if (WIFSIGNALED(s)) return 128 + WTERMSIG(s);
  return -1;
}

std::string ChildProcess::LogTail(size_t max_bytes) const {
  const std::string all = ReadFile(log_path_);
  return all.size() <= max_bytes ? all : all.substr(all.size() - max_bytes);
}

absl::StatusOr<std::unique_ptr<ChildProcess>> StartOnFreePorts(
    int num_ports, const std::function<std::vector<std::string>(const std::vector<int>&)>& argv,
    const std::string& log_path, const std::function<bool(const std::vector<int>&)>& ready,
    std::vector<int>* ports, int attempts) {
  std::string why = "no attempt";
  for (int attempt = 0; attempt < attempts; ++attempt) {
    ports->clear();
    for (int i = 0; i < num_ports; ++i) {
      const int port = FreeLoopbackPort();
      if (port <= 0) return absl::UnavailableError("no free loopback port");
      ports->push_back(port);
    }
    auto p = ChildProcess::Start(argv(*ports), log_path);  // the log is appended to
    if (!p.ok()) return p.status();
    ChildProcess* proc = p->get();
    // Either it serves, or it exited (a port was taken): an event either way.
    if (!WaitFor([&] { return !proc->Running() || ready(*ports); }, absl::Seconds(60))) {
      return absl::DeadlineExceededError(absl::StrCat("not ready after 60 s: ", proc->LogTail()));
    }
    if (proc->Running()) return p;
    why = absl::StrCat("exited ", proc->exit_code().value_or(-1), " on ports ",
                       absl::StrJoin(*ports, ","), ": ", proc->LogTail(500));
  }
  return absl::UnavailableError(absl::StrCat(attempts, " starts failed; the last ", why));
}

// --- Cluster --------------------------------------------------------------------------

Cluster::Cluster(std::string model_path)
    : model_path_(std::move(model_path)), dir_(MakeTempDir("cluster-", /*keep=*/true)) {}

Cluster::~Cluster() {
  stub_.reset();
  channel_.reset();
  // Workers first: a worker outliving its scheduler would only retry, but the order
  // keeps the logs quiet. They are asked to stop (SIGTERM) before they are killed: rank
  // 0 of a tensor-parallel group unlinks its shared-memory segment as it exits, which a
  // SIGKILL would leave in /dev/shm (where a worker of a later test, in another PID
  // namespace, cannot tell it is stale). A first SIGTERM drains the replica (instant
  // when idle); a second one, for workers still draining after 1 s, stops them at once.
  for (auto& [key, w] : workers_) w->Signal(SIGTERM);
  const absl::Time end = absl::Now() + absl::Seconds(5);
  for (auto& [key, w] : workers_) w->Wait(std::max(absl::ZeroDuration(), end - absl::Seconds(4) - absl::Now()));
  for (auto& [key, w] : workers_) w->Signal(SIGTERM);  // no-op for reaped ones
  for (auto& [key, w] : workers_) w->Wait(std::max(absl::ZeroDuration(), end - absl::Now()));
  workers_.clear();  // SIGKILLs whatever did not exit
  scheduler_.reset();
}

absl::Status Cluster::StartScheduler(std::vector<std::string> extra_flags, int worker_port) {
  const int n = restarts_++;
  const std::string ports = absl::StrCat(dir_, "/scheduler-", n, ".ports.json");
  std::vector<std::string> argv = {
      Runfile("scheduler/service/weft-scheduler"),
      absl::StrCat("--model=", model_path_),
      "--host=127.0.0.1",
      "--port=0",
      absl::StrCat("--worker_port=", worker_port),
      "--metrics_port=0",
      absl::StrCat("--ports_file=", ports),
  };
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  auto p = ChildProcess::Start(argv, absl::StrCat(dir_, "/scheduler-", n, ".log"));
  if (!p.ok()) return p.status();
  scheduler_ = std::move(*p);
  auto json = WaitPortsFile(ports, scheduler_.get(), absl::Seconds(60));
  if (!json.ok()) {
    return absl::Status(json.status().code(), absl::StrCat("weft-scheduler: ", json.status().message(),
                                                           "\n", scheduler_->LogTail()));
  }
  port_ = JsonInt(*json, "port");
  worker_port_ = JsonInt(*json, "worker_port");
  metrics_port_ = JsonInt(*json, "metrics_port");
  http_port_ = std::max(-1, JsonInt(*json, "http_port"));
  if (port_ <= 0 || worker_port_ <= 0 || metrics_port_ <= 0) {
    return absl::InternalError(absl::StrCat("bad ports file: ", *json));
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  channel_ = NewChannel(args);
  stub_ = weft::v1::Generation::NewStub(channel_);
  return absl::OkStatus();
}

std::string Cluster::WorkerKey(const std::string& replica, int rank) {
  return rank == 0 ? replica : absl::StrCat(replica, "/", rank);
}

absl::Status Cluster::SpawnWorker(const WorkerSpec& spec, std::string* ports_file) {
  if (worker_port_ <= 0) return absl::FailedPreconditionError("start the scheduler first");
  const std::string key = WorkerKey(spec.replica, spec.rank);
  workers_.erase(key);  // SIGKILL + reap a previous process of this replica and rank
  worker_metrics_ports_.erase(key);
  const int n = restarts_++;
  const std::string file_stem =
      absl::StrCat(dir_, "/worker-", spec.replica, "-rank", spec.rank, "-", n);
  *ports_file = file_stem + ".ports.json";
  std::vector<std::string> argv = {
      Runfile("worker/service/weft-worker"),
      absl::StrCat("--scheduler=127.0.0.1:", worker_port_),
      absl::StrCat("--model=", spec.model_path.empty() ? model_path_ : spec.model_path),
      absl::StrCat("--replica=", spec.replica),
      absl::StrCat("--rank=", spec.rank),
      absl::StrCat("--world_size=", spec.world_size),
      absl::StrCat("--num_kv_blocks=", spec.num_kv_blocks),
      absl::StrCat("--threads=", spec.threads),
      "--metrics_port=0",
      absl::StrCat("--ports_file=", *ports_file),
  };
  argv.insert(argv.end(), spec.extra_flags.begin(), spec.extra_flags.end());
  auto p = ChildProcess::Start(argv, file_stem + ".log");
  if (!p.ok()) return p.status();
  workers_[key] = std::move(*p);
  return absl::OkStatus();
}

absl::Status Cluster::AwaitWorker(const WorkerSpec& spec, const std::string& ports_file) {
  const std::string key = WorkerKey(spec.replica, spec.rank);
  ChildProcess* proc = workers_.at(key).get();
  auto json = WaitPortsFile(ports_file, proc, absl::Seconds(120));
  if (!json.ok()) {
    return absl::Status(json.status().code(), absl::StrCat("weft-worker ", key, ": ",
                                                           json.status().message(), "\n",
                                                           proc->LogTail()));
  }
  worker_metrics_ports_[key] = JsonInt(*json, "metrics_port");
  return absl::OkStatus();
}

absl::Status Cluster::StartWorker(const WorkerSpec& spec) {
  std::string ports_file;
  if (absl::Status s = SpawnWorker(spec, &ports_file); !s.ok()) return s;
  return AwaitWorker(spec, ports_file);
}

absl::Status Cluster::StartReplica(const WorkerSpec& spec) {
  std::vector<WorkerSpec> ranks;
  std::vector<std::string> ports_files;
  for (int r = 0; r < spec.world_size; ++r) {
    ranks.push_back(spec);
    ranks.back().rank = r;
    ports_files.emplace_back();
    if (absl::Status s = SpawnWorker(ranks.back(), &ports_files.back()); !s.ok()) return s;
  }
  for (int r = 0; r < spec.world_size; ++r) {
    if (absl::Status s = AwaitWorker(ranks[r], ports_files[r]); !s.ok()) return s;
  }
  return absl::OkStatus();
}

ChildProcess* Cluster::worker(const std::string& replica, int rank) {
  auto it = workers_.find(WorkerKey(replica, rank));
  return it == workers_.end() ? nullptr : it->second.get();
}

std::string Cluster::address() const { return absl::StrCat("127.0.0.1:", port_); }

int Cluster::worker_metrics_port(const std::string& replica, int rank) const {
  auto it = worker_metrics_ports_.find(WorkerKey(replica, rank));
  return it == worker_metrics_ports_.end() ? -1 : it->second;
}

absl::StatusOr<MetricsPage> Cluster::WorkerMetrics(const std::string& replica, int rank) const {
  const int port = worker_metrics_port(replica, rank);
  if (port <= 0) {
    return absl::NotFoundError(absl::StrCat("no metrics port for ", WorkerKey(replica, rank)));
  }
  return ScrapeMetrics(port);
}

double Cluster::Metric(const std::string& series) const {
  auto m = Metrics();
  return m.ok() ? m->Get(series, std::nan("")) : std::nan("");
}

double Cluster::Steps() const {
  auto m = Metrics();
  return m.ok() ? m->Sum("weft_steps_total") : std::nan("");
}

absl::Status Cluster::WaitReplicas(int n, absl::Duration timeout) {
  double last = -1;
  if (WaitFor(
          [&] {
            last = Metric("weft_replicas");
            return last == n;
          },
          timeout, absl::Milliseconds(100))) {
    return absl::OkStatus();
  }
  return absl::DeadlineExceededError(absl::StrCat("weft_replicas is ", last, ", want ", n,
                                                  " after ", absl::FormatDuration(timeout), "\n",
                                                  Logs()));
}

absl::Status Cluster::WaitWorkerAttached(const std::string& replica, double attachments,
                                         absl::Duration timeout) {
  double seen = -1, attached = -1;
  WaitFor(
      [&] {
        auto m = WorkerMetrics(replica);
        seen = m.ok() ? m->Get("weft_worker_attachments_total", -1) : -1;
        attached = m.ok() ? m->Get("weft_worker_attached", -1) : -1;
        return seen >= attachments && attached == 1;
      },
      timeout);
  if (seen == attachments && attached == 1) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(replica, ": attachments ", seen, " (want ",
                                                    attachments, "), attached ", attached, "\n",
                                                    Logs()));
}

absl::Status Cluster::WaitWorkerSampledMore(const std::string& replica, double before,
                                            absl::Duration timeout) {
  double seen = -1;
  if (WaitFor(
          [&] {
            auto m = WorkerMetrics(replica);
            seen = m.ok() ? m->Get("weft_worker_sampled_tokens_total", -1) : -1;
            return seen > before;
          },
          timeout, absl::Milliseconds(5))) {
    return absl::OkStatus();
  }
  return absl::DeadlineExceededError(absl::StrCat(replica, " sampled ", seen, " tokens in all (",
                                                  before, " before) after ",
                                                  absl::FormatDuration(timeout), "\n", Logs()));
}

std::string Cluster::Health() const {
  auto stub = grpc::health::v1::Health::NewStub(channel_ ? channel_ : NewChannel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp);
  if (!s.ok()) return absl::StrCat("error ", CodeName(s.error_code()), ": ", s.error_message());
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status());
}

std::shared_ptr<grpc::Channel> Cluster::NewChannel(const grpc::ChannelArguments& args) const {
  grpc::ChannelArguments a = args;
  // Each channel its own connection: tests that need per-connection behaviour (flow
  // control of a reader that never reads) must not share a subchannel with others.
  a.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto creds = MakeChannelCredentials(client_tls_, &a);
  if (!creds.ok()) {
    // A bad test setup: calls on this channel fail with the reason.
    std::fprintf(stderr, "client TLS: %s\n", std::string(creds.status().message()).c_str());
    return grpc::CreateChannel("unix:/nonexistent/bad-client-tls", grpc::InsecureChannelCredentials());
  }
  return grpc::CreateCustomChannel(address(), *creds, a);
}

weft::v1::Generation::Stub* Cluster::stub() { return stub_.get(); }

std::string Cluster::Logs() const {
  std::string out;
  if (scheduler_) absl::StrAppend(&out, "--- scheduler log tail ---\n", scheduler_->LogTail(), "\n");
  for (const auto& [name, w] : workers_) {
    absl::StrAppend(&out, "--- worker ", name, " log tail ---\n", w->LogTail(1500), "\n");
  }
  return out;
}

// --- Generate helpers ----------------------------------------------------------------------

StreamResult Generate(weft::v1::Generation::Stub* stub, const weft::v1::GenerateRequest& request,
                      absl::Duration deadline,
                      const std::function<bool(const weft::v1::GenerateResponse&)>& on_message,
                      grpc::ClientContext* context) {
  grpc::ClientContext own;
  grpc::ClientContext* ctx = context != nullptr ? context : &own;
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  StreamResult r;
  auto reader = stub->Generate(ctx, request);
  weft::v1::GenerateResponse resp;
  bool cancelled = false;
  while (reader->Read(&resp)) {
    ++r.num_messages;
    if (resp.index() == 0) {
      r.token_ids.insert(r.token_ids.end(), resp.token_ids().begin(), resp.token_ids().end());
      r.text += resp.text();
      if (resp.finish_reason() != weft::v1::FINISH_REASON_UNSPECIFIED) {
        r.finish_reason = resp.finish_reason();
      }
    }
    if (resp.has_usage()) {
      r.has_usage = true;
      r.usage = resp.usage();
    }
    if (!cancelled && on_message && !on_message(resp)) {
      cancelled = true;
      ctx->TryCancel();
    }
  }
  r.status = reader->Finish();
  return r;
}

BackgroundStream::BackgroundStream(weft::v1::Generation::Stub* stub,
                                   weft::v1::GenerateRequest request, absl::Duration deadline) {
  thread_ = std::thread([this, stub, request = std::move(request), deadline] {
    result_ = Generate(
        stub, request, deadline,
        [this](const weft::v1::GenerateResponse& r) {
          if (r.index() == 0) num_tokens_.fetch_add(r.token_ids_size());
          return true;
        },
        &context_);
    done_.store(true);
  });
}

BackgroundStream::~BackgroundStream() {
  if (thread_.joinable()) {
    context_.TryCancel();
    thread_.join();
  }
}

bool BackgroundStream::WaitTokens(int n, absl::Duration timeout) const {
  WaitFor([&] { return num_tokens_.load() >= n || done_.load(); }, timeout, absl::Milliseconds(10));
  return num_tokens_.load() >= n;
}

StreamResult BackgroundStream::Join(absl::Duration timeout) {
  if (!WaitFor([&] { return done_.load(); }, timeout, absl::Milliseconds(10))) context_.TryCancel();
  if (thread_.joinable()) thread_.join();
  return result_;
}

weft::v1::GenerateRequest GreedyRequest(const std::string& prompt, int max_tokens) {
  weft::v1::GenerateRequest req;
  req.set_text(prompt);
  req.mutable_sampling()->set_temperature(0);
  req.mutable_stopping()->set_max_tokens(max_tokens);
  req.mutable_stopping()->set_ignore_eos(true);
  return req;
}

std::vector<std::vector<int32_t>> GreedyOutputs(Cluster& cluster, const std::vector<std::string>& prompts,
                                                int max_tokens) {
  std::vector<std::vector<int32_t>> out(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] {
      StreamResult r = Generate(cluster.stub(), GreedyRequest(prompts[i], max_tokens));
      if (r.status.ok()) out[i] = r.token_ids;
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

RunResult RunToEnd(std::vector<std::string> argv, absl::Duration timeout) {
  const std::string dir = MakeTempDir("run-");
  RunResult r;
  auto p = ChildProcess::Start(std::move(argv), dir + "/stderr", dir + "/stdout");
  if (!p.ok()) {
    r.log = std::string(p.status().message());
    return r;
  }
  if ((*p)->Wait(timeout).has_value()) r.code = *(*p)->exit_code();
  r.out = ReadFile(dir + "/stdout");
  r.log = ReadFile(dir + "/stderr");
  return r;
}

absl::StatusOr<std::vector<int32_t>> ReferenceTokens(const std::string& model_path,
                                                     const std::string& prompt, int max_tokens,
                                                     const std::vector<std::string>& extra_flags) {
  std::vector<std::string> argv = {
      Runfile("worker/weft-generate"), absl::StrCat("--model=", model_path),
      absl::StrCat("--prompt=", prompt), absl::StrCat("--max_tokens=", max_tokens),
      "--temperature=0", "--ignore_eos", "--print_token_ids", "--threads=1"};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  const RunResult r = RunToEnd(std::move(argv), absl::Seconds(120));
  if (r.code != 0) {
    const size_t tail = r.log.size() > 4000 ? r.log.size() - 4000 : 0;
    return absl::InternalError(absl::StrCat("weft-generate failed: ", r.log.substr(tail)));
  }
  std::vector<int32_t> ids;
  for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(line, &id)) return absl::InternalError(absl::StrCat("bad line: ", line));
    ids.push_back(id);
  }
  return ids;
}

std::vector<std::string> GroupSegments(const std::string& replica) {
  std::vector<std::string> out;
  const std::string prefix = absl::StrCat("weft-comm-", replica, "-e");
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return out;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) == 0) out.push_back(name);
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end());
  return out;
}

std::string CodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

}  // namespace weft::e2e

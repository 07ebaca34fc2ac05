// End to end: weft-bench's driver against an in-process fake Generation gRPC service
// and an in-process fake llama-server (a socket server thread speaking chunked SSE).
// Asserts what a user would check — requests completed and failed, tokens counted,
// the same prompts sent to both targets, interleaving, the JSON and plot files —
// never wall-clock speed.
#include "tools/bench/bench.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "tools/bench/plot.h"
#include "weft/v1/generate.grpc.pb.h"

namespace weft {
namespace bench {
namespace {

// Records every prompt it receives; fails every `fail_every`-th call.
class PromptLog {
 public:
  int Add(const std::vector<int32_t>& prompt) {
    std::lock_guard<std::mutex> l(mu_);
    ++prompts_[prompt];
    return ++calls_;
  }
  std::map<std::vector<int32_t>, int> prompts() {
    std::lock_guard<std::mutex> l(mu_);
    return prompts_;
  }
  int calls() {
    std::lock_guard<std::mutex> l(mu_);
    return calls_;
  }

 private:
  std::mutex mu_;
  std::map<std::vector<int32_t>, int> prompts_;
  int calls_ = 0;
};

class FakeGeneration final : public weft::v1::Generation::Service {
 public:
  int fail_every = 0;
  int tokens_per_message = 1;
  PromptLog log;
  std::atomic<int> bad_requests{0};

  grpc::Status Generate(grpc::ServerContext*, const weft::v1::GenerateRequest* req,
                        grpc::ServerWriter<weft::v1::GenerateResponse>* writer) override {
    const std::vector<int32_t> prompt(req->token_ids().ids().begin(), req->token_ids().ids().end());
    const int n = log.Add(prompt);
    if (!req->has_token_ids() || !req->stopping().ignore_eos() ||
        !req->sampling().has_temperature() || req->sampling().temperature() != 0) {
      ++bad_requests;
    }
    if (fail_every > 0 && n % fail_every == 0) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "queue full");
    }
    const int max_tokens = req->stopping().max_tokens();
    weft::v1::GenerateResponse resp;
    resp.set_seed(7);
    resp.set_request_id(absl::StrCat("r", n));
    for (int sent = 0; sent < max_tokens;) {
      const int k = std::min(tokens_per_message, max_tokens - sent);
      for (int i = 0; i < k; ++i) resp.add_token_ids(1000 + sent + i);
      sent += k;
      if (sent == max_tokens) {
        resp.set_finish_reason(weft::v1::FINISH_REASON_LENGTH);
        resp.mutable_usage()->set_prompt_tokens(static_cast<int32_t>(prompt.size()));
        resp.mutable_usage()->set_completion_tokens(max_tokens);
      }
      if (!writer->Write(resp)) return grpc::Status(grpc::StatusCode::CANCELLED, "gone");
      resp.Clear();
    }
    return grpc::Status::OK;
  }
};

class GrpcFixture {
 public:
  GrpcFixture() {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(&service);
    server_ = b.BuildAndStart();
  }
  ~GrpcFixture() { server_->Shutdown(); }
  std::string url() const { return absl::StrCat("grpc://127.0.0.1:", port_); }

  FakeGeneration service;

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// A fake llama-server: POST /completion -> chunked SSE, one event per token, except
// that token `hold_back_at` is sent together with the next one (as llama-server does
// for incomplete UTF-8), then the final event. Chunks are 7 bytes, written in two
// pieces each, so frames straddle SSE lines and CRLFs.
class FakeLlamaServer {
 public:
  int fail_every = 0;
  int hold_back_at = 2;
  PromptLog log;
  std::atomic<int> bad_requests{0};

  FakeLlamaServer() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int one = 1;
    setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(fd_, 128), 0);
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    accept_ = std::thread([this] { AcceptLoop(); });
  }
  ~FakeLlamaServer() {
    shutdown(fd_, SHUT_RDWR);  // wakes accept()
    accept_.join();
    close(fd_);
    for (std::thread& t : conns_) t.join();
  }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }

 private:
  void AcceptLoop() {
    while (true) {
      const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      conns_.emplace_back([this, c] {
        Handle(c);
        close(c);
      });
    }
  }

  static void Send(int fd, const std::string& s) {
    for (size_t off = 0; off < s.size();) {
      const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }

  // Reads the request; returns its JSON body (discarded on error).
  static nlohmann::json ReadRequest(int fd) {
    std::string in;
    char buf[4096];
    size_t header_end = std::string::npos;
    int64_t length = -1;
    while (true) {
      if (header_end == std::string::npos) header_end = in.find("\r\n\r\n");
      if (header_end != std::string::npos && length < 0) {
        const std::string head = absl::AsciiStrToLower(in.substr(0, header_end));
        const size_t cl = head.find("content-length:");
        if (cl == std::string::npos) return nlohmann::json::value_t::discarded;
        const size_t eol = head.find("\r\n", cl);
        if (!absl::SimpleAtoi(head.substr(cl + 15, eol - cl - 15), &length)) {
          return nlohmann::json::value_t::discarded;
        }
      }
      if (length >= 0 && in.size() >= header_end + 4 + length) break;
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) return nlohmann::json::value_t::discarded;
      in.append(buf, static_cast<size_t>(n));
    }
    return nlohmann::json::parse(in.substr(header_end + 4, length), nullptr, false);
  }

  void Handle(int fd) {
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const nlohmann::json req = ReadRequest(fd);
    if (req.is_discarded() || !req["prompt"].is_array() || req["ignore_eos"] != true ||
        req["stream"] != true || req["cache_prompt"] != false || req["temperature"] != 0) {
      ++bad_requests;
      Send(fd, "HTTP/1.1 400 Bad Request\r\nContent-Length: 2\r\n\r\n{}");
      return;
    }
    const int n = log.Add(req["prompt"].get<std::vector<int32_t>>());
    if (fail_every > 0 && n % fail_every == 0) {
      const std::string body = R"({"error":{"code":503,"message":"Loading model"}})";
      Send(fd, absl::StrCat("HTTP/1.1 503 Service Unavailable\r\nContent-Type: "
                            "application/json\r\nContent-Length: ",
                            body.size(), "\r\n\r\n", body));
      return;
    }
    const int n_predict = req["n_predict"].get<int>();
    std::string sse;
    for (int i = 1; i <= n_predict; ++i) {
      if (i == hold_back_at && i < n_predict) continue;  // sent with the next token
      absl::StrAppend(&sse, "data: {\"index\":0,\"content\":\"t\",\"tokens\":[", i,
                      "],\"stop\":false,\"id_slot\":0,\"tokens_predicted\":", i,
                      ",\"tokens_evaluated\":", req["prompt"].size(), "}\n\n");
    }
    absl::StrAppend(&sse, "data: {\"index\":0,\"content\":\"\",\"tokens\":[],\"stop\":true,",
                    "\"tokens_predicted\":", n_predict, ",\"timings\":{\"predicted_n\":",
                    n_predict, ",\"cache_n\":0}}\n\n");
    Send(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
             "Transfer-Encoding: chunked\r\n\r\n");
    for (size_t off = 0; off < sse.size(); off += 7) {
      const std::string piece = sse.substr(off, 7);
      char size[8];
      std::snprintf(size, sizeof(size), "%zx", piece.size());
      const std::string chunk = absl::StrCat(size, "\r\n", piece, "\r\n");
      Send(fd, chunk.substr(0, 2));
      Send(fd, chunk.substr(2));
    }
    Send(fd, "0\r\n\r\n");
  }

  int fd_ = -1;
  int port_ = 0;
  std::thread accept_;
  std::vector<std::thread> conns_;  // only the accept thread appends; joined after it
};

std::string TmpPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

// Files worth looking at after the test (bazel-testlogs/.../test.outputs).
std::string OutputPath(const std::string& name) {
  const char* dir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  return dir != nullptr ? std::string(dir) + "/" + name : TmpPath(name);
}

BenchOptions BaseOptions() {
  BenchOptions o;
  o.trace.kind = TraceKind::kShort;
  o.trace.num_requests = 24;
  o.trace.seed = 11;
  o.concurrency = {1, 4};
  o.progress.mode = ProgressMode::kOff;
  return o;
}

int64_t TraceOutputTokens(const BenchOptions& o) {
  int64_t sum = 0;
  for (const TraceRequest& r : GenerateTrace(o.trace)) sum += r.max_tokens;
  return sum;
}

absl::StatusOr<BenchResult> RunAndPrint(const BenchOptions& o) {
  std::ostringstream out;
  absl::StatusOr<BenchResult> r = RunBench(o, out, std::cerr);
  std::cout << out.str();  // the table, for the test log
  return r;
}

TEST(BenchEndToEndTest, GrpcClosedLoopSweepCountsEveryToken) {
  GrpcFixture weft;
  weft.service.tokens_per_message = 2;  // k-token messages: k-1 zero gaps each
  BenchOptions o = BaseOptions();
  o.targets = {absl::StrCat("weft=", weft.url())};
  o.warmup_requests = 3;
  o.json_out = TmpPath("grpc.json");
  o.plot_out = TmpPath("grpc.png");
  o.per_request = true;
  o.progress.mode = ProgressMode::kLines;
  absl::StatusOr<BenchResult> r = RunAndPrint(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->runs.size(), 2u);
  const int64_t want_tokens = TraceOutputTokens(o);
  for (const RunResult& run : r->runs) {
    EXPECT_EQ(run.summary.num_ok, 24);
    EXPECT_EQ(run.summary.num_failed, 0);
    EXPECT_EQ(run.summary.num_short, 0);
    EXPECT_EQ(run.summary.num_count_mismatch, 0);
    EXPECT_EQ(run.summary.output_tokens, want_tokens);
    EXPECT_EQ(run.summary.itl_s.count, want_tokens - 24);  // tokens - 1 gaps per request
    EXPECT_EQ(run.summary.ttft_s.count, 24);
    EXPECT_GT(run.summary.output_tok_s, 0);
  }
  EXPECT_EQ(r->runs[0].level.value, 1);
  EXPECT_EQ(r->runs[1].level.value, 4);
  EXPECT_EQ(weft.service.bad_requests.load(), 0);
  EXPECT_EQ(weft.service.log.calls(), 3 + 2 * 24);
  // Salted per run: no prompt was sent twice, so no prefix cache could hit.
  for (const auto& [prompt, count] : weft.service.log.prompts()) EXPECT_EQ(count, 1);

  std::ifstream jf(o.json_out);
  const nlohmann::json doc = nlohmann::json::parse(jf, nullptr, false);
  ASSERT_FALSE(doc.is_discarded());
  EXPECT_EQ(doc["config"]["trace"], "short");
  EXPECT_EQ(doc["config"]["num_requests"], 24);
  ASSERT_EQ(doc["runs"].size(), 2u);
  EXPECT_EQ(doc["runs"][1]["summary"]["output_tokens"], want_tokens);
  ASSERT_EQ(doc["runs"][0]["requests"].size(), 24u);
  EXPECT_EQ(doc["runs"][0]["requests"][5]["index"], 5);
  EXPECT_TRUE(doc["comparisons"].empty());
  if (!FindOnPath("gnuplot").empty()) {
    std::ifstream png(o.plot_out, std::ios::binary);
    EXPECT_TRUE(png.good()) << "no plot written";
  }
}

TEST(BenchEndToEndTest, GrpcAndLlamaInterleavedSameTrace) {
  GrpcFixture weft;
  FakeLlamaServer llama;
  BenchOptions o = BaseOptions();
  o.targets = {absl::StrCat("weft=", weft.url()), absl::StrCat("llama=", llama.url())};
  o.concurrency = {3};
  o.pairs = 2;
  o.json_out = OutputPath("ab.json");
  o.plot_out = OutputPath("ab.png");
  absl::StatusOr<BenchResult> r = RunAndPrint(o);
  ASSERT_TRUE(r.ok()) << r.status();
  // A B A B.
  ASSERT_EQ(r->runs.size(), 4u);
  const std::vector<std::pair<std::string, int>> order = {
      {"weft", 0}, {"llama", 0}, {"weft", 1}, {"llama", 1}};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(r->runs[i].target, order[i].first);
    EXPECT_EQ(r->runs[i].pair, order[i].second);
  }
  const int64_t want_tokens = TraceOutputTokens(o);
  for (const RunResult& run : r->runs) {
    EXPECT_EQ(run.summary.num_ok, 24) << run.target;
    EXPECT_EQ(run.summary.output_tokens, want_tokens) << run.target;
    EXPECT_EQ(run.summary.num_count_mismatch, 0) << run.target;
    EXPECT_EQ(run.summary.num_short, 0) << run.target;
  }
  EXPECT_EQ(llama.bad_requests.load(), 0);
  EXPECT_EQ(weft.service.bad_requests.load(), 0);
  // Both engines received exactly the same prompts.
  EXPECT_EQ(weft.service.log.prompts(), llama.log.prompts());
  EXPECT_EQ(llama.log.calls(), 48);
  ASSERT_EQ(r->comparisons.size(), 1u);
  EXPECT_EQ(r->comparisons[0].numerator, "weft");
  EXPECT_EQ(r->comparisons[0].denominator, "llama");
  EXPECT_EQ(r->comparisons[0].ratios[0].per_pair.size(), 2u);
  std::ifstream jf(o.json_out);
  const nlohmann::json doc = nlohmann::json::parse(jf, nullptr, false);
  ASSERT_EQ(doc["comparisons"].size(), 1u);
  EXPECT_EQ(doc["comparisons"][0]["ratios"]["output_tok_s"]["per_pair"].size(), 2u);
}

TEST(BenchEndToEndTest, FailuresAreCountedNotDropped) {
  GrpcFixture weft;
  weft.service.fail_every = 4;
  FakeLlamaServer llama;
  llama.fail_every = 6;
  BenchOptions o = BaseOptions();
  o.targets = {weft.url(), llama.url()};
  o.concurrency = {2};
  o.pairs = 1;
  absl::StatusOr<BenchResult> r = RunAndPrint(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->runs.size(), 2u);
  const RunSummary& g = r->runs[0].summary;
  EXPECT_EQ(g.num_requests, 24);
  EXPECT_EQ(g.num_failed, 6);
  EXPECT_EQ(g.num_ok, 18);
  ASSERT_EQ(g.errors.count("RESOURCE_EXHAUSTED: queue full"), 1u);
  EXPECT_EQ(g.errors.at("RESOURCE_EXHAUSTED: queue full"), 6);
  const RunSummary& h = r->runs[1].summary;
  EXPECT_EQ(h.num_failed, 4);
  EXPECT_EQ(h.num_ok, 20);
  ASSERT_EQ(h.errors.size(), 1u);
  EXPECT_NE(h.errors.begin()->first.find("UNAVAILABLE: HTTP 503"), std::string::npos);
  EXPECT_EQ(r->num_failed, 10);
}

TEST(BenchEndToEndTest, UnreachableTargetsFailEveryRequest) {
  // Ports that were just free: nothing listens there.
  int ports[2];
  for (int& p : ports) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    p = ntohs(a.sin_port);
    close(fd);
  }
  BenchOptions o = BaseOptions();
  o.targets = {absl::StrCat("grpc://127.0.0.1:", ports[0]),
               absl::StrCat("http://127.0.0.1:", ports[1])};
  o.concurrency = {4};
  o.pairs = 1;
  o.request.timeout_s = 20;
  absl::StatusOr<BenchResult> r = RunAndPrint(o);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const RunResult& run : r->runs) {
    EXPECT_EQ(run.summary.num_failed, 24) << run.target;
    EXPECT_EQ(run.summary.num_ok, 0);
    EXPECT_EQ(run.summary.output_tok_s, 0);
  }
  EXPECT_EQ(r->num_failed, 48);
}

TEST(BenchEndToEndTest, PoissonArrivalsAndReplayOfADumpedTrace) {
  GrpcFixture weft;
  FakeLlamaServer llama;
  BenchOptions o = BaseOptions();
  o.targets = {weft.url(), llama.url()};
  o.rates = {400};
  o.pairs = 1;
  o.dump_trace = TmpPath("poisson.jsonl");
  absl::StatusOr<BenchResult> r = RunAndPrint(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->runs.size(), 2u);
  for (const RunResult& run : r->runs) {
    EXPECT_EQ(run.level.mode, LoadMode::kPoisson);
    EXPECT_EQ(run.summary.num_ok, 24) << run.target;
    EXPECT_EQ(run.summary.output_tokens, TraceOutputTokens(o)) << run.target;
  }
  // The dumped trace has the arrivals; replay it (all of it) against llama alone.
  absl::StatusOr<std::vector<TraceRequest>> dumped = ReadTraceFile(o.dump_trace);
  ASSERT_TRUE(dumped.ok()) << dumped.status();
  ASSERT_EQ(dumped->size(), 24u);
  EXPECT_EQ((*dumped)[0].arrival_s, 0);
  EXPECT_GT((*dumped)[23].arrival_s, 0);
  BenchOptions replay = BaseOptions();
  replay.targets = {llama.url()};
  replay.trace_file = o.dump_trace;
  replay.trace.num_requests = 0;
  replay.replay_arrivals = true;
  r = RunAndPrint(replay);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->runs.size(), 1u);
  EXPECT_EQ(r->runs[0].level.mode, LoadMode::kReplay);
  EXPECT_EQ(r->runs[0].summary.num_ok, 24);
  EXPECT_EQ(r->runs[0].summary.output_tokens, TraceOutputTokens(o));
}

// No gRPC at all (so it can run under TSan): open and closed loop over HTTP, with
// progress lines drawn while requests complete.
TEST(BenchEndToEndTest, LlamaOnlyOpenAndClosedLoop) {
  FakeLlamaServer llama;
  BenchOptions o = BaseOptions();
  o.targets = {llama.url()};
  o.progress.mode = ProgressMode::kLines;
  o.progress.line_interval = absl::Milliseconds(1);
  for (const bool open_loop : {true, false}) {
    if (open_loop) o.rates = {1000};
    if (!open_loop) o.rates.clear();
    absl::StatusOr<BenchResult> r = RunAndPrint(o);
    ASSERT_TRUE(r.ok()) << r.status();
    for (const RunResult& run : r->runs) {
      EXPECT_EQ(run.summary.num_ok, 24);
      EXPECT_EQ(run.summary.output_tokens, TraceOutputTokens(o));
    }
  }
  EXPECT_EQ(llama.log.calls(), 24 * 3);
}

TEST(BenchEndToEndTest, DumpTraceAloneNeedsNoTarget) {
  BenchOptions o = BaseOptions();
  o.dump_trace = TmpPath("only.jsonl");
  absl::StatusOr<BenchResult> r = RunAndPrint(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->runs.empty());
  absl::StatusOr<std::vector<TraceRequest>> t = ReadTraceFile(o.dump_trace);
  ASSERT_TRUE(t.ok());
  const std::vector<TraceRequest> want = GenerateTrace(o.trace);
  ASSERT_EQ(t->size(), want.size());
  EXPECT_EQ((*t)[3].prompt, want[3].prompt);  // unsalted: the trace itself
}

TEST(BenchOptionsTest, Validate) {
  BenchOptions o = BaseOptions();
  EXPECT_FALSE(o.Validate().ok());  // no target, no dump
  o.targets = {"grpc://127.0.0.1:1"};
  EXPECT_TRUE(o.Validate().ok());
  o.concurrency = {0};
  EXPECT_FALSE(o.Validate().ok());
  o.concurrency = {1};
  o.rates = {-1};
  EXPECT_FALSE(o.Validate().ok());
  o.rates = {};
  o.replay_arrivals = true;
  EXPECT_FALSE(o.Validate().ok());  // needs a trace file
  o.replay_arrivals = false;
  o.request.timeout_s = 0;
  EXPECT_FALSE(o.Validate().ok());
}

}  // namespace
}  // namespace bench
}  // namespace weft

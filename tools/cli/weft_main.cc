// weft: command-line client for a running weft-scheduler (directly or through a proxy).
//
//   weft generate --server=HOST:PORT --prompt="..." [--model --max_tokens --n --seed
//                 --temperature --top_p --top_k --min_p --repetition_penalty
//                 --presence_penalty --frequency_penalty --stop=S (repeatable)
//                 --stop_token_ids=1,2 --ignore_eos --logprobs=K --chat --system="..."
//                 --priority --print_token_ids --timeout_s]   streams the text to stdout
//   weft models  --server=HOST:PORT      lists served models
//   weft health  --server=HOST:PORT [--service=NAME]   SERVING / NOT_SERVING (exit 0 / 1)
// Connection flags (every command): --model also goes out as the `x-weft-model` metadata
// (proxies route by it); --tls (or any of --tls_ca --tls_cert --tls_key) dials TLS,
// --tls_server_name checks the server's certificate for that name; the bearer token is
// read from --token_file or the WEFT_TOKEN environment variable.
//
// Retries (README.md, "Clients retry"; the Python client's Retry follows the same rule):
// a generate or models call that ends UNAVAILABLE (or CANCELLED by the server) before
// the server sent anything (no token streamed) is made again, up to --max_attempts calls in all, waiting
// --retry_initial_backoff_s doubling up to --retry_max_backoff_s (shortened at random by
// up to a fifth) between them, all within --timeout_s. A call that streamed a token is
// never repeated. health is never retried (probes want the answer of now).
//
// Stdout carries only generated text (or ids with --print_token_ids); everything else
// (seed, finish reasons, usage, logprobs, errors) goes to stderr. Errors print the status
// name and message ("weft: NOT_FOUND: model 'x' is not served here ...").
// Exit status: 0 ok; 2 a bad command line, or INVALID_ARGUMENT from the server (the
// request the arguments made is invalid); 1 any other failure.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/tls_credentials.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "weft/v1/generate.grpc.pb.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "scheduler (or proxy) address host:port");
ABSL_FLAG(std::string, model, "",
          "model name; also sent as x-weft-model metadata for proxies (empty: the only one)");
ABSL_FLAG(std::string, prompt, "", "prompt text (with --chat/--system: the user message)");
ABSL_FLAG(bool, chat, false, "send --prompt as the user message of a chat (ChatML)");
ABSL_FLAG(std::string, system, "", "a system message (implies --chat)");
ABSL_FLAG(int32_t, max_tokens, -1, "tokens to generate (-1: server default)");
ABSL_FLAG(std::string, temperature, "", "sampling temperature (unset: 1.0; 0 greedy)");
ABSL_FLAG(std::string, top_p, "", "nucleus sampling, in (0, 1] (unset: 1)");
ABSL_FLAG(int32_t, top_k, -1, "top-k (-1: unset, off)");
ABSL_FLAG(std::string, min_p, "", "min-p, in [0, 1] (unset: 0)");
ABSL_FLAG(std::string, repetition_penalty, "", "repetition penalty, in (0, 10] (unset: 1, off)");
ABSL_FLAG(std::string, presence_penalty, "", "presence penalty, in [-2, 2] (unset: 0)");
ABSL_FLAG(std::string, frequency_penalty, "", "frequency penalty, in [-2, 2] (unset: 0)");
ABSL_FLAG(int64_t, seed, -1, "RNG seed (-1: server picks and reports it)");
ABSL_FLAG(bool, ignore_eos, false, "keep generating past end-of-sequence");
ABSL_FLAG(std::string, stop, "",
          "a stop string; repeat the flag for several (a value may contain commas)");
ABSL_FLAG(std::string, stop_token_ids, "", "comma-separated token ids that end a sample");
ABSL_FLAG(int32_t, logprobs, -1,
          "print each token's log-probability and this many alternatives (0..20) to stderr");
ABSL_FLAG(int32_t, n, 1, "samples");
ABSL_FLAG(int32_t, priority, 0, "request priority (higher first)");
ABSL_FLAG(bool, print_token_ids, false, "print one token id per line instead of text");
ABSL_FLAG(double, timeout_s, 600, "call deadline in seconds (retries included)");
ABSL_FLAG(int32_t, max_attempts, 10,
          "calls in all for a generate or models call that fails UNAVAILABLE (or is CANCELLED "
          "by the server) before anything was streamed (1: no retry)");
ABSL_FLAG(double, retry_initial_backoff_s, 0.25, "wait before the first retry, in seconds");
ABSL_FLAG(double, retry_max_backoff_s, 5, "longest wait between retries (doubling up to it)");
ABSL_FLAG(std::string, service, "", "weft health: the service to ask about (\"\": the server)");
ABSL_FLAG(bool, tls, false, "dial TLS (the system's CA roots unless --tls_ca)");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA bundle that signed the server's certificate");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate (servers that ask for one)");
ABSL_FLAG(std::string, tls_key, "", "PEM key of --tls_cert");
ABSL_FLAG(std::string, tls_server_name, "", "name the server's certificate must carry");
ABSL_FLAG(std::string, token_file, "",
          "file holding the bearer token (default: the WEFT_TOKEN environment variable)");

namespace {

constexpr int kExitFailure = 1;

// A bad command line: message and exit status 2.
int Usage(const std::string& message) {
  std::cerr << "weft: " << message << " (see weft --help)\n";
  return weft::kExitUsage;
}

int Fail(const grpc::Status& s) {
  std::cerr << "weft: " << absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code()))
            << ": " << s.error_message() << "\n";
  return s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ? weft::kExitUsage : kExitFailure;
}

// The deadline of a generate or models call, its retries included: --timeout_s from now.
std::chrono::system_clock::time_point CallDeadline() {
  return std::chrono::system_clock::now() +
         std::chrono::milliseconds(static_cast<int64_t>(absl::GetFlag(FLAGS_timeout_s) * 1000));
}

// When a call that failed is made again (see the header comment).
struct RetryPolicy {
  int32_t max_attempts = 10;
  double initial_backoff_s = 0.25;
  double max_backoff_s = 5;
  static constexpr double kMultiplier = 2;
  static constexpr double kJitter = 0.2;

  static absl::StatusOr<RetryPolicy> FromFlags() {
    RetryPolicy p;
    p.max_attempts = absl::GetFlag(FLAGS_max_attempts);
    p.initial_backoff_s = absl::GetFlag(FLAGS_retry_initial_backoff_s);
    p.max_backoff_s = absl::GetFlag(FLAGS_retry_max_backoff_s);
    if (p.max_attempts < 1) return absl::InvalidArgumentError("--max_attempts must be >= 1");
    if (!(p.initial_backoff_s > 0) || !(p.max_backoff_s >= p.initial_backoff_s)) {
      return absl::InvalidArgumentError(
          "need 0 < --retry_initial_backoff_s <= --retry_max_backoff_s");
    }
    return p;
  }

  // After `attempts` calls, the last ending with `s` and nothing received: waits and
  // returns true when another call is due (within `deadline`), else false.
  bool Wait(const grpc::Status& s, int attempts,
            std::chrono::system_clock::time_point deadline) const {
    // CANCELLED: this CLI never cancels its own calls, so the server did (gRPC 1.51's
    // does to a call that races a draining scheduler's GOAWAY).
    const bool retryable = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                           s.error_code() == grpc::StatusCode::CANCELLED;
    if (!retryable || attempts >= max_attempts) return false;
    static std::mt19937_64 rng{std::random_device{}()};
    const double base =
        std::min(max_backoff_s, initial_backoff_s * std::pow(kMultiplier, attempts - 1));
    const double wait_s = base * (1 - kJitter * std::uniform_real_distribution<>(0, 1)(rng));
    const auto wait = std::chrono::duration_cast<std::chrono::system_clock::duration>(
        std::chrono::duration<double>(wait_s));
    if (std::chrono::system_clock::now() + wait >= deadline) return false;
    std::cerr << "weft: "
              << absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())) << ": "
              << s.error_message() << "; retrying in " << wait_s << " s (call " << attempts + 1
              << " of " << max_attempts << ")\n";
    std::this_thread::sleep_for(wait);
    return true;
  }
};

// How every call is made: channel credentials, metadata, deadline.
struct Connection {
  std::shared_ptr<grpc::Channel> channel;
  std::string token;
  std::string model;
  RetryPolicy retry;

  void Prepare(grpc::ClientContext* ctx, std::chrono::system_clock::time_point deadline) const {
    ctx->set_deadline(deadline);
    if (!model.empty()) ctx->AddMetadata("x-weft-model", model);
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  }
  void Prepare(grpc::ClientContext* ctx, std::chrono::milliseconds timeout) const {
    Prepare(ctx, std::chrono::system_clock::now() + timeout);
  }
};

// Builds the connection from the flags; an error is a usage error.
absl::StatusOr<Connection> Connect() {
  Connection c;
  c.model = absl::GetFlag(FLAGS_model);
  std::string token_file = absl::GetFlag(FLAGS_token_file);
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in) {
      return absl::InvalidArgumentError(absl::StrCat("cannot read --token_file ", token_file));
    }
    std::stringstream s;
    s << in.rdbuf();
    c.token = std::string(absl::StripAsciiWhitespace(s.str()));
  } else if (const char* env = std::getenv("WEFT_TOKEN"); env != nullptr) {
    c.token = std::string(absl::StripAsciiWhitespace(env));
  }
  absl::StatusOr<RetryPolicy> retry = RetryPolicy::FromFlags();
  if (!retry.ok()) return retry.status();
  c.retry = *retry;
  weft::ClientTlsFiles tls;
  tls.use_tls = absl::GetFlag(FLAGS_tls);
  tls.ca = absl::GetFlag(FLAGS_tls_ca);
  tls.cert = absl::GetFlag(FLAGS_tls_cert);
  tls.key = absl::GetFlag(FLAGS_tls_key);
  tls.server_name = absl::GetFlag(FLAGS_tls_server_name);
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 64 << 20);
  auto creds = weft::MakeChannelCredentials(tls, &args);
  if (!creds.ok()) return creds.status();
  c.channel = grpc::CreateCustomChannel(absl::GetFlag(FLAGS_server), *creds, args);
  return c;
}

// An optional number flag: nullopt when unset; an error names the flag.
absl::StatusOr<std::optional<float>> OptionalFloat(const std::string& value, const char* name) {
  if (value.empty()) return std::nullopt;
  float f = 0;
  if (!absl::SimpleAtof(value, &f) || !std::isfinite(f)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, " is not a number"));
  }
  return f;
}

// Fills the request from the flags; an error is a usage error.
absl::Status BuildRequest(const std::vector<std::string>& stops, weft::v1::GenerateRequest* req) {
  if (absl::GetFlag(FLAGS_prompt).empty()) {
    return absl::InvalidArgumentError("--prompt is required");
  }
  req->set_model(absl::GetFlag(FLAGS_model));
  const std::string system = absl::GetFlag(FLAGS_system);
  if (absl::GetFlag(FLAGS_chat) || !system.empty()) {
    if (!system.empty()) {
      auto* m = req->mutable_chat()->add_messages();
      m->set_role("system");
      m->set_content(system);
    }
    auto* m = req->mutable_chat()->add_messages();
    m->set_role("user");
    m->set_content(absl::GetFlag(FLAGS_prompt));
  } else {
    req->set_text(absl::GetFlag(FLAGS_prompt));
  }
  weft::v1::SamplingParams* s = req->mutable_sampling();
  struct FloatFlag {
    const char* name;
    std::string value;
    void (weft::v1::SamplingParams::*set)(float);
  };
  const FloatFlag floats[] = {
      {"temperature", absl::GetFlag(FLAGS_temperature), &weft::v1::SamplingParams::set_temperature},
      {"top_p", absl::GetFlag(FLAGS_top_p), &weft::v1::SamplingParams::set_top_p},
      {"min_p", absl::GetFlag(FLAGS_min_p), &weft::v1::SamplingParams::set_min_p},
      {"repetition_penalty", absl::GetFlag(FLAGS_repetition_penalty),
       &weft::v1::SamplingParams::set_repetition_penalty},
      {"presence_penalty", absl::GetFlag(FLAGS_presence_penalty),
       &weft::v1::SamplingParams::set_presence_penalty},
      {"frequency_penalty", absl::GetFlag(FLAGS_frequency_penalty),
       &weft::v1::SamplingParams::set_frequency_penalty},
  };
  for (const FloatFlag& f : floats) {
    auto v = OptionalFloat(f.value, f.name);
    if (!v.ok()) return v.status();
    if (v->has_value()) (s->*f.set)(**v);
  }
  if (absl::GetFlag(FLAGS_top_k) >= 0) s->set_top_k(absl::GetFlag(FLAGS_top_k));
  if (absl::GetFlag(FLAGS_seed) >= 0) s->set_seed(absl::GetFlag(FLAGS_seed));
  weft::v1::StoppingParams* st = req->mutable_stopping();
  if (absl::GetFlag(FLAGS_max_tokens) >= 0) st->set_max_tokens(absl::GetFlag(FLAGS_max_tokens));
  st->set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  for (const std::string& stop : stops) st->add_stop(stop);
  for (absl::string_view id :
       absl::StrSplit(absl::GetFlag(FLAGS_stop_token_ids), ',', absl::SkipWhitespace())) {
    int32_t v = 0;
    if (!absl::SimpleAtoi(id, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--stop_token_ids: '", id, "' is not a token id"));
    }
    st->add_stop_token_ids(v);
  }
  if (absl::GetFlag(FLAGS_n) != 1) req->set_n(absl::GetFlag(FLAGS_n));
  if (absl::GetFlag(FLAGS_logprobs) >= 0) req->set_logprobs(absl::GetFlag(FLAGS_logprobs));
  req->set_priority(absl::GetFlag(FLAGS_priority));
  return absl::OkStatus();
}

std::string Printable(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

void PrintLogprobs(const weft::v1::GenerateResponse& resp) {
  for (int i = 0; i < resp.logprobs_size() && i < resp.token_ids_size(); ++i) {
    const weft::v1::Logprobs& lp = resp.logprobs(i);
    std::cerr << "weft: sample " << resp.index() << " token " << resp.token_ids(i) << " logprob "
              << lp.logprob();
    for (const auto& t : lp.top()) {
      std::cerr << " | " << t.token_id() << " '" << Printable(t.token_bytes()) << "' "
                << t.logprob();
    }
    std::cerr << "\n";
  }
}

// One Generate call, its responses printed as they arrive. `received` tells whether the
// server sent anything (then the call is never made again).
grpc::Status GenerateOnce(const Connection& conn, const weft::v1::GenerateRequest& req,
                          std::chrono::system_clock::time_point deadline, bool* received) {
  grpc::ClientContext ctx;
  conn.Prepare(&ctx, deadline);
  auto stub = weft::v1::Generation::NewStub(conn.channel);
  auto reader = stub->Generate(&ctx, req);
  weft::v1::GenerateResponse resp;
  const bool ids = absl::GetFlag(FLAGS_print_token_ids);
  const bool multi = absl::GetFlag(FLAGS_n) > 1;
  bool wrote_text = false;
  while (reader->Read(&resp)) {
    *received = true;
    if (resp.has_seed()) {
      std::cerr << "weft: request " << resp.request_id() << " seed " << resp.seed() << "\n";
    }
    if (ids) {
      for (int32_t t : resp.token_ids()) {
        if (multi) std::printf("%d ", resp.index());
        std::printf("%d\n", t);
      }
    } else if (!resp.text().empty()) {
      std::fwrite(resp.text().data(), 1, resp.text().size(), stdout);
      wrote_text = true;
    }
    std::fflush(stdout);
    PrintLogprobs(resp);
    if (resp.finish_reason() != weft::v1::FINISH_REASON_UNSPECIFIED) {
      std::cerr << (wrote_text ? "\n" : "") << "weft: sample " << resp.index()
                << " finished: " << weft::v1::FinishReason_Name(resp.finish_reason()) << "\n";
    }
    if (resp.has_usage()) {
      const auto& u = resp.usage();
      std::cerr << "weft: prompt " << u.prompt_tokens() << " (cached " << u.cached_prompt_tokens()
                << "), completion " << u.completion_tokens() << ", queue " << u.queue_time_seconds()
                << " s, ttft " << u.time_to_first_token_seconds() << " s\n";
    }
  }
  if (!ids && wrote_text) std::printf("\n");
  return reader->Finish();
}

int Generate(const Connection& conn, const std::vector<std::string>& stops) {
  weft::v1::GenerateRequest req;
  if (absl::Status s = BuildRequest(stops, &req); !s.ok()) return Usage(std::string(s.message()));
  const auto deadline = CallDeadline();
  for (int attempts = 1;; ++attempts) {
    bool received = false;
    grpc::Status s = GenerateOnce(conn, req, deadline, &received);
    if (s.ok()) return 0;
    if (received || !conn.retry.Wait(s, attempts, deadline)) return Fail(s);
  }
}

int Models(const Connection& conn) {
  const auto deadline = CallDeadline();
  weft::v1::ListModelsResponse resp;
  for (int attempts = 1;; ++attempts) {
    grpc::ClientContext ctx;  // each call its own context, 10 s each at most
    conn.Prepare(&ctx,
                 std::min(deadline, std::chrono::system_clock::now() + std::chrono::seconds(10)));
    grpc::Status s = weft::v1::Generation::NewStub(conn.channel)
                         ->ListModels(&ctx, weft::v1::ListModelsRequest(), &resp);
    if (s.ok()) break;
    if (!conn.retry.Wait(s, attempts, deadline)) return Fail(s);
  }
  for (const auto& m : resp.models()) {
    std::cout << m.name() << "\tcontext " << m.context_length() << "\tvocab " << m.vocab_size()
              << "\treplicas " << m.num_replicas() << "\tfingerprint "
              << m.fingerprint().substr(0, 16)
              << (m.chat_template().empty() ? "" : "\tchat " + m.chat_template()) << "\n";
  }
  return 0;
}

int Health(const Connection& conn) {
  grpc::ClientContext ctx;
  conn.Prepare(&ctx, std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(absl::GetFlag(FLAGS_service));
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = grpc::health::v1::Health::NewStub(conn.channel)->Check(&ctx, req, &resp);
  if (!s.ok()) {
    Fail(s);
    return kExitFailure;  // for probes: anything but SERVING is 1
  }
  std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status()) << "\n";
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : kExitFailure;
}

}  // namespace

int main(int argc, char** argv) {
  // --stop may be given several times; Abseil would keep only the last one.
  const std::vector<std::string> stops = weft::RepeatedFlagValues(argc, argv, "stop");
  std::vector<char*> args =
      weft::ParseFlags(argc, argv, "weft generate|models|health --server=HOST:PORT [flags]");
  if (args.size() != 2) return Usage("expected one command: generate, models or health");
  const std::string cmd = args[1];
  if (cmd != "generate" && cmd != "models" && cmd != "health") {
    return Usage(absl::StrCat("unknown command '", cmd, "' (generate, models, health)"));
  }
  absl::StatusOr<Connection> conn = Connect();
  if (!conn.ok()) return Usage(std::string(conn.status().message()));
  if (cmd == "generate") return Generate(*conn, stops);
  if (cmd == "models") return Models(*conn);
  return Health(*conn);
}

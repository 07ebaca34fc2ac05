// weft-scheduler: serves weft.v1.Generation (public port) and WorkerControl/Attach (worker
// port) for one model; CPU only; never links a model runtime.
//
//   weft-scheduler --model=models/X.gguf [--model_name --port=50051 --worker_port=50052
//                  --metrics_port=9090 --http_port=8000
//                  --policy=decode-first|prefill-first|static ...]
// Port 0 picks an ephemeral port; the chosen ports are logged and, with --ports_file,
// written as JSON {"port":..,"worker_port":..,"metrics_port":..,"http_port":..}
// (-1: off). --http_port serves the OpenAI-compatible HTTP API (http_server.h).
// SIGTERM/SIGINT: not ready at once, new calls UNAVAILABLE, running streams finish up to
// --drain_timeout_s, the rest end UNAVAILABLE, exit 0.
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/gguf.h"
#include "common/metrics_http.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "scheduler/service/engine.h"
#include "scheduler/service/generate_frontend.h"
#include "scheduler/service/http_server.h"
#include "scheduler/service/model_text.h"
#include "scheduler/service/services.h"

ABSL_FLAG(std::string, model, "models/SmolLM2-135M-Instruct.Q4_1.gguf", "GGUF model file");
ABSL_FLAG(std::string, model_name, "", "served model name (default: the GGUF's general.name)");
ABSL_FLAG(std::string, host, "0.0.0.0", "address to bind (gRPC ports and /metrics)");
ABSL_FLAG(int32_t, port, 50051, "public Generate port (0 = ephemeral)");
ABSL_FLAG(int32_t, worker_port, 50052, "port workers attach to (0 = ephemeral)");
ABSL_FLAG(int32_t, metrics_port, 9090, "Prometheus /metrics port (0 = ephemeral, -1 = off)");
ABSL_FLAG(int32_t, http_port, -1,
          "OpenAI-compatible HTTP API port (/v1/completions, /v1/chat/completions, /v1/models, "
          "/health); -1 = off, 0 = ephemeral; 8000 is the conventional one (vLLM's)");
ABSL_FLAG(int32_t, http_max_connections, 512,
          "HTTP connections served at once (one thread each); more wait to be accepted");
ABSL_FLAG(std::string, ports_file, "", "write the bound ports here as JSON");
ABSL_FLAG(std::string, policy, "decode-first", "decode-first | prefill-first | static");
ABSL_FLAG(int32_t, block_size, 16, "tokens per KV block");
ABSL_FLAG(int32_t, max_num_batched_tokens, 2048, "token budget of one step");
ABSL_FLAG(int32_t, max_num_seqs, 256, "sequences per step");
ABSL_FLAG(int32_t, max_steps_in_flight, 1, "steps planned ahead per replica (2 = pipelined)");
ABSL_FLAG(int32_t, max_tokens_cap, 4096, "largest max_tokens a request may ask for");
ABSL_FLAG(int32_t, max_waiting, 4096, "waiting-queue bound (sequences)");
ABSL_FLAG(int32_t, max_streams, 1024, "open Generate streams");
ABSL_FLAG(int64_t, stream_buffer_bytes, 4 << 20,
          "response bytes queued per stream; a reader that falls this far behind is ended "
          "RESOURCE_EXHAUSTED");
ABSL_FLAG(int32_t, max_retries, 2, "re-queues after a replica is lost");
ABSL_FLAG(bool, prefix_caching, true, "automatic prefix caching");
ABSL_FLAG(double, step_deadline_floor_s, 10, "step deadline floor (seconds)");
ABSL_FLAG(double, step_deadline_k, 8, "step deadline = max(floor, k x s/token x tokens)");
ABSL_FLAG(double, stall_timeout_s, 10, "end a stream whose client stops reading this long");
ABSL_FLAG(double, drain_timeout_s, 30, "SIGTERM: how long running streams may finish");
ABSL_FLAG(int64_t, max_message_bytes, 4 << 20, "largest request message accepted");

namespace weft {
namespace {

absl::StatusOr<PolicyKind> ParsePolicyFlag(const std::string& p) {
  if (p == "decode-first") return PolicyKind::kDecodeFirst;
  if (p == "prefill-first") return PolicyKind::kPrefillFirst;
  if (p == "static") return PolicyKind::kStatic;
  return absl::InvalidArgumentError(absl::StrCat("--policy: unknown '", p,
                                                 "' (decode-first, prefill-first, static)"));
}

std::unique_ptr<grpc::Server> Serve(const std::string& host, int port, grpc::Service* service,
                                    grpc::Service* extra, int* bound, int64_t max_message) {
  grpc::ServerBuilder b;
  b.AddListeningPort(absl::StrCat(host, ":", port), grpc::InsecureServerCredentials(), bound);
  b.RegisterService(service);
  if (extra != nullptr) b.RegisterService(extra);
  b.SetMaxReceiveMessageSize(static_cast<int>(max_message));
  b.SetMaxSendMessageSize(256 << 20);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  b.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  return b.BuildAndStart();
}

int Main() {
  auto policy = ParsePolicyFlag(absl::GetFlag(FLAGS_policy));
  if (!policy.ok()) {
    LOG(ERROR) << policy.status().message();
    return 2;
  }
  auto file = GgufFile::Open(absl::GetFlag(FLAGS_model));
  if (!file.ok()) {
    LOG(ERROR) << "cannot load the model: " << file.status().message();
    return 1;
  }
  auto text = ModelText::Load(**file, absl::GetFlag(FLAGS_model_name));
  if (!text.ok()) {
    LOG(ERROR) << "cannot load the model's tokenizer/metadata: " << text.status().message();
    return 1;
  }
  const ModelText& mt = **text;

  EngineOptions eo;
  eo.core.policy = *policy;
  eo.core.block_size = absl::GetFlag(FLAGS_block_size);
  eo.core.max_num_batched_tokens = absl::GetFlag(FLAGS_max_num_batched_tokens);
  eo.core.max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
  eo.core.max_model_len = mt.context_length();
  eo.core.enable_prefix_caching = absl::GetFlag(FLAGS_prefix_caching);
  eo.core.max_steps_in_flight = absl::GetFlag(FLAGS_max_steps_in_flight);
  eo.core.max_waiting = absl::GetFlag(FLAGS_max_waiting);
  eo.core.max_retries = absl::GetFlag(FLAGS_max_retries);
  eo.core.eos_token_ids = mt.eos_token_ids();
  eo.core.vocab_size = mt.vocab_size();
  eo.step_deadline.floor = absl::Seconds(absl::GetFlag(FLAGS_step_deadline_floor_s));
  eo.step_deadline.k = absl::GetFlag(FLAGS_step_deadline_k);
  eo.stall_timeout = absl::Seconds(absl::GetFlag(FLAGS_stall_timeout_s));
  eo.max_inbox_submissions = static_cast<size_t>(absl::GetFlag(FLAGS_max_waiting));
  if (absl::Status s = eo.Validate(); !s.ok()) {
    LOG(ERROR) << "bad flags: " << s.message();
    return 2;
  }

  ServiceMetrics metrics;
  std::unique_ptr<MetricsHttp> metrics_http;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    // Same interface as the gRPC ports (--host): 127.0.0.1 keeps everything on loopback.
    auto m = MetricsHttp::Start(absl::GetFlag(FLAGS_metrics_port), metrics.registry(),
                                absl::GetFlag(FLAGS_host));
    if (!m.ok()) {
      LOG(ERROR) << m.status().message();
      return 1;
    }
    metrics_http = std::move(*m);
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::unique_ptr<grpc::Server> public_server;
  std::unique_ptr<OpenAiHttpServer> http;
  auto set_health = [&public_server, &http](bool serving) {
    if (public_server != nullptr && public_server->GetHealthCheckService() != nullptr) {
      public_server->GetHealthCheckService()->SetServingStatus(serving);
    }
    if (http != nullptr) http->SetServing(serving);
  };
  Engine engine(eo, mt.expected_model(eo.core.block_size), mt.model_info(), &mt.text_source(),
                &metrics, set_health);

  ValidationLimits limits;
  limits.model_name = mt.name();
  limits.vocab_size = mt.vocab_size();
  limits.context_length = mt.context_length();
  limits.max_tokens_cap = absl::GetFlag(FLAGS_max_tokens_cap);
  FrontendOptions fo;
  fo.max_streams = absl::GetFlag(FLAGS_max_streams);
  fo.stream_buffer_bytes = static_cast<size_t>(std::max<int64_t>(0, absl::GetFlag(FLAGS_stream_buffer_bytes)));
  if (absl::Status s = fo.Validate(); !s.ok()) {
    LOG(ERROR) << "bad flags: " << s.message();
    return 2;
  }
  // One front end for both public APIs: one stream limit, one validator, one queue.
  GenerateFrontend frontend(fo, limits, &mt.encoder(), &engine, &metrics);
  GenerationService generation(&frontend);
  WorkerControlService control(&engine);

  int port = 0, worker_port = 0;
  const std::string host = absl::GetFlag(FLAGS_host);
  public_server = Serve(host, absl::GetFlag(FLAGS_port), &generation, nullptr, &port,
                        absl::GetFlag(FLAGS_max_message_bytes));
  std::unique_ptr<grpc::Server> worker_server =
      Serve(host, absl::GetFlag(FLAGS_worker_port), &control, nullptr, &worker_port, 64 << 20);
  if (public_server == nullptr || worker_server == nullptr || port == 0 || worker_port == 0) {
    LOG(ERROR) << "cannot bind the gRPC ports (" << absl::GetFlag(FLAGS_port) << ", "
               << absl::GetFlag(FLAGS_worker_port) << "): in use?";
    return 1;
  }
  if (absl::GetFlag(FLAGS_http_port) >= 0) {
    HttpServerOptions ho;
    ho.host = host;
    ho.port = absl::GetFlag(FLAGS_http_port);
    ho.max_connections = absl::GetFlag(FLAGS_http_max_connections);
    ho.max_body_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_max_message_bytes));
    // A client that stops reading: the same patience as the engine's stall guard.
    ho.write_timeout = std::max(absl::Seconds(1), absl::Seconds(absl::GetFlag(FLAGS_stall_timeout_s)));
    auto h = OpenAiHttpServer::Start(ho, &frontend, &mt.text_source(), metrics.registry());
    if (!h.ok()) {
      LOG(ERROR) << h.status().message();
      return absl::IsInvalidArgument(h.status()) ? 2 : 1;
    }
    http = std::move(*h);
  }
  set_health(false);  // NOT_SERVING until a replica attaches
  if (absl::Status s = engine.Start(); !s.ok()) {
    LOG(ERROR) << "cannot start: " << s.message();
    return 1;
  }
  LOG(INFO) << "weft-scheduler serving '" << mt.name() << "' on " << host << ":" << port
            << " (workers attach on port " << worker_port << ", metrics on "
            << (metrics_http ? metrics_http->port() : -1) << ", OpenAI HTTP API on "
            << (http ? http->port() : -1) << ", policy " << absl::GetFlag(FLAGS_policy) << ")";
  if (const std::string pf = absl::GetFlag(FLAGS_ports_file); !pf.empty()) {
    std::ofstream(pf + ".tmp") << "{\"port\": " << port << ", \"worker_port\": " << worker_port
                               << ", \"metrics_port\": " << (metrics_http ? metrics_http->port() : -1)
                               << ", \"http_port\": " << (http ? http->port() : -1) << "}\n";
    std::rename((pf + ".tmp").c_str(), pf.c_str());
  }

  // Wait for SIGTERM/SIGINT (blocked in every thread, taken here).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  int sig = 0;
  sigwait(&set, &sig);
  LOG(INFO) << "signal " << sig << ": draining for up to " << absl::GetFlag(FLAGS_drain_timeout_s) << " s";
  engine.BeginDrain();
  const int ended = engine.WaitDrained(absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_drain_timeout_s)));
  engine.Stop();
  if (http != nullptr) http->Stop();
  public_server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  worker_server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  LOG(INFO) << "stopped (" << ended << " streams ended by the drain timeout)";
  return 0;
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  // Signals are taken by sigwait in main; block them before any thread starts.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  absl::SetProgramUsageMessage("weft-scheduler --model=FILE.gguf [--port --worker_port ...]");
  absl::ParseCommandLine(argc, argv);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  return weft::Main();
}

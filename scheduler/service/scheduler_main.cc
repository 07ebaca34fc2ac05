// weft-scheduler: serves weft.v1.Generation (public port) and WorkerControl/Attach (worker
// port) for one model; CPU only; never links a model runtime.
//
//   weft-scheduler --model=models/X.gguf [--model_name --port=50051 --worker_port=50052
//                  --metrics_port=9090 --http_port=8000
//                  --policy=decode-first|prefill-first|static ...]
//                  [--tls_cert --tls_key [--tls_client_ca]] [--auth_tokens_file]
//                  [--worker_tls_cert --worker_tls_key --worker_tls_ca]
// Port 0 picks an ephemeral port; the chosen ports are logged and, with --ports_file,
// written as JSON {"port":..,"worker_port":..,"metrics_port":..,"http_port":..}
// (-1: off). --http_port serves the OpenAI-compatible HTTP API (http_server.h).
// The model is served as --model_name, by default the file's stem in lower case
// (DefaultModelName). Chat prompts use the model's chat template, or --chat_template FILE
// (required for chat with a model file that has none). The public port serves weft.v1.Generation, grpc.health.v1.Health
// (services "", weft.v1.Generation and the model name) and server reflection; with
// --tls_cert/--tls_key it speaks TLS only (client certificates required when
// --tls_client_ca is given), with --auth_tokens_file Generate and ListModels need a
// bearer token (health and reflection stay open for probes). The HTTP API (--http_port)
// is the same public surface: the same TLS files and the same tokens (its /health open
// too). The attach port is mutual
// TLS when --worker_tls_* are given: a worker needs a certificate from that CA.
// SIGTERM/SIGINT: not ready at once, new calls UNAVAILABLE, running streams finish up to
// --drain_timeout_s, the rest end UNAVAILABLE, exit 0.
// HTTP on --metrics_port (common/metrics_http.h): /metrics; /livez 200 while the process
// runs; /startupz 200 once the ports are bound and the engine runs; /readyz 200 while
// the gRPC health is SERVING: a replica that does not drain is admitted and making
// progress, and the scheduler itself does not drain.
// A worker's SIGTERM drains its replica: no new sequences there, the running ones
// finish for up to --worker_drain_timeout_s, then the rest is re-queued on the other
// replicas with its generated tokens, and the worker is released.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/gguf.h"
#include "common/metrics_http.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "common/tls_credentials.h"
#include "scheduler/service/bearer_tokens.h"
#include "scheduler/service/engine.h"
#include "scheduler/service/generate_frontend.h"
#include "scheduler/service/health_service.h"
#include "scheduler/service/http_server.h"
#include "scheduler/service/model_text.h"
#include "scheduler/service/services.h"

ABSL_FLAG(std::string, model, "models/SmolLM2-135M-Instruct.Q4_1.gguf", "GGUF model file");
ABSL_FLAG(std::string, model_name, "",
          "served model name, routable by x-weft-model (default: the file's stem, lower case)");
ABSL_FLAG(std::string, chat_template, "",
          "Jinja chat template file replacing the model's tokenizer.chat_template (for "
          "models without one)");
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
ABSL_FLAG(int32_t, max_steps_in_flight, 0,
          "steps planned ahead per replica (1 = synchronous, 2 = pipelined); 0 = by the "
          "replica's backend: 2 for cuda and null, 1 for cpu");
ABSL_FLAG(int32_t, max_tokens_cap, 4096, "largest max_tokens a request may ask for");
ABSL_FLAG(int32_t, max_waiting, 4096, "waiting-queue bound (sequences)");
ABSL_FLAG(int32_t, max_streams, 1024,
          "open generation calls, gRPC Generate and HTTP /v1/*completions together");
ABSL_FLAG(int64_t, stream_buffer_bytes, 4 << 20,
          "response bytes queued per stream; a reader that falls this far behind is ended "
          "RESOURCE_EXHAUSTED");
ABSL_FLAG(int32_t, max_retries, 2, "re-queues after a replica is lost");
ABSL_FLAG(bool, prefix_caching, true, "automatic prefix caching");
ABSL_FLAG(double, step_deadline_floor_s, 10, "step deadline floor (seconds)");
ABSL_FLAG(double, step_deadline_k, 8, "step deadline = max(floor, k x s/token x tokens)");
ABSL_FLAG(double, stall_timeout_s, 10, "end a stream whose client stops reading this long");
ABSL_FLAG(int32_t, stream_interval_tokens, 1,
          "tokens per stream message: >1 holds a sample's tokens back until that many are "
          "ready (its first and last messages go out at once), fewer writes for up to "
          "N-1 steps of inter-token latency; 1 sends every step's tokens as they come");
ABSL_FLAG(double, drain_timeout_s, 30, "SIGTERM: how long running streams may finish");
ABSL_FLAG(double, worker_drain_timeout_s, 60,
          "a worker's SIGTERM drains its replica: how long its running sequences may finish "
          "before the rest is re-queued on other replicas (generated tokens kept)");
ABSL_FLAG(int64_t, max_message_bytes, 4 << 20, "largest request message accepted");
// One flag set for the whole public surface: the gRPC port and the HTTP API.
ABSL_FLAG(std::string, tls_cert, "",
          "public surface (gRPC --port and HTTP --http_port alike): PEM certificate chain; "
          "with --tls_key both ports speak TLS only (re-read every 60 s: renewals need no "
          "restart)");
ABSL_FLAG(std::string, tls_key, "", "public surface (gRPC and HTTP): PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "public surface (gRPC and HTTP): PEM CA bundle; clients must present a certificate "
          "it signed");
ABSL_FLAG(std::string, auth_tokens_file, "",
          "bearer tokens, one a line ('#' comments), re-read when the file changes; gRPC "
          "Generate/ListModels and HTTP /v1/* without one of them are UNAUTHENTICATED / 401 "
          "(health stays open; empty: no auth)");
ABSL_FLAG(std::string, worker_tls_cert, "",
          "attach port: PEM certificate chain (mutual TLS with --worker_tls_key/--worker_tls_ca)");
ABSL_FLAG(std::string, worker_tls_key, "", "attach port: PEM private key of --worker_tls_cert");
ABSL_FLAG(std::string, worker_tls_ca, "",
          "attach port: PEM CA bundle; a worker must present a certificate it signed");

namespace weft {
namespace {

absl::StatusOr<PolicyKind> ParsePolicyFlag(const std::string& p) {
  if (p == "decode-first") return PolicyKind::kDecodeFirst;
  if (p == "prefill-first") return PolicyKind::kPrefillFirst;
  if (p == "static") return PolicyKind::kStatic;
  return absl::InvalidArgumentError(absl::StrCat("--policy: unknown '", p,
                                                 "' (decode-first, prefill-first, static)"));
}

std::unique_ptr<grpc::Server> Serve(const std::string& host, int port,
                                    const std::shared_ptr<grpc::ServerCredentials>& creds,
                                    std::vector<grpc::Service*> services, int* bound,
                                    int64_t max_message) {
  grpc::ServerBuilder b;
  b.AddListeningPort(absl::StrCat(host, ":", port), creds, bound);
  for (grpc::Service* service : services) b.RegisterService(service);
  b.SetMaxReceiveMessageSize(static_cast<int>(max_message));
  b.SetMaxSendMessageSize(256 << 20);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  b.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  return b.BuildAndStart();
}

// The edge from the flags: both ports' credentials and the bearer tokens, checked before
// anything is served (an error is a bad flag: exit 2).
struct Edge {
  ServerTlsFiles public_tls;
  ServerTlsFiles worker_tls;
  std::shared_ptr<grpc::ServerCredentials> public_creds;
  std::shared_ptr<grpc::ServerCredentials> worker_creds;
  std::unique_ptr<BearerTokens> tokens;  // null: no auth
};

absl::StatusOr<Edge> LoadEdge() {
  Edge e;
  e.public_tls.cert = absl::GetFlag(FLAGS_tls_cert);
  e.public_tls.key = absl::GetFlag(FLAGS_tls_key);
  e.public_tls.client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  e.worker_tls.cert = absl::GetFlag(FLAGS_worker_tls_cert);
  e.worker_tls.key = absl::GetFlag(FLAGS_worker_tls_key);
  e.worker_tls.client_ca = absl::GetFlag(FLAGS_worker_tls_ca);
  if (e.worker_tls.enabled() &&
      (e.worker_tls.cert.empty() || e.worker_tls.key.empty() || e.worker_tls.client_ca.empty())) {
    return absl::InvalidArgumentError(
        "the attach port's TLS is mutual: give --worker_tls_cert, --worker_tls_key and "
        "--worker_tls_ca together");
  }
  auto public_creds = MakeServerCredentials(e.public_tls);
  if (!public_creds.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--tls_*: ", public_creds.status().message()));
  }
  e.public_creds = *public_creds;
  auto worker_creds = MakeServerCredentials(e.worker_tls);
  if (!worker_creds.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--worker_tls_*: ", worker_creds.status().message()));
  }
  e.worker_creds = *worker_creds;
  if (const std::string f = absl::GetFlag(FLAGS_auth_tokens_file); !f.empty()) {
    BearerTokens::Options to;
    to.path = f;
    auto t = BearerTokens::Load(to);
    if (!t.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auth_tokens_file: ", t.status().message()));
    }
    e.tokens = std::move(*t);
    LOG(INFO) << "bearer tokens required (" << e.tokens->num_tokens() << " in " << f << ")";
    if (!e.public_tls.enabled()) {
      LOG(WARNING) << "bearer tokens on a plaintext port: only safe behind a TLS-terminating "
                      "proxy or mesh (give --tls_cert/--tls_key otherwise)";
    }
  }
  if (!e.worker_tls.enabled()) {
    LOG(WARNING) << "the attach port is plaintext: any host that reaches it can attach as a "
                    "worker (give --worker_tls_cert/--worker_tls_key/--worker_tls_ca)";
  }
  return e;
}

int Main() {
  auto policy = ParsePolicyFlag(absl::GetFlag(FLAGS_policy));
  if (!policy.ok()) {
    LOG(ERROR) << policy.status().message();
    return 2;
  }
  // Metadata only (header, vocabulary, tensor table): no weight page is mapped or read,
  // so the scheduler's memory and its pod's download do not grow with the model.
  auto file = GgufFile::OpenMetadata(absl::GetFlag(FLAGS_model));
  if (!file.ok()) {
    LOG(ERROR) << "cannot load the model: " << file.status().message();
    return 1;
  }
  std::string model_name = absl::GetFlag(FLAGS_model_name);
  if (model_name.empty()) model_name = DefaultModelName(absl::GetFlag(FLAGS_model));
  if (absl::Status s = CheckModelName(model_name); !s.ok()) {
    LOG(ERROR) << "--model_name: " << s.message();
    return 2;
  }
  auto text = ModelText::Load(**file, model_name, absl::GetFlag(FLAGS_chat_template));
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
  const int32_t steps_in_flight = absl::GetFlag(FLAGS_max_steps_in_flight);
  eo.core.max_steps_in_flight = steps_in_flight == 0 ? 1 : steps_in_flight;
  eo.steps_in_flight_by_backend = steps_in_flight == 0;
  eo.core.max_waiting = absl::GetFlag(FLAGS_max_waiting);
  eo.core.max_retries = absl::GetFlag(FLAGS_max_retries);
  eo.core.eos_token_ids = mt.eos_token_ids();
  eo.core.vocab_size = mt.vocab_size();
  eo.step_deadline.floor = absl::Seconds(absl::GetFlag(FLAGS_step_deadline_floor_s));
  eo.step_deadline.k = absl::GetFlag(FLAGS_step_deadline_k);
  eo.stall_timeout = absl::Seconds(absl::GetFlag(FLAGS_stall_timeout_s));
  eo.stream_interval_tokens = absl::GetFlag(FLAGS_stream_interval_tokens);
  eo.worker_drain_timeout = absl::Seconds(absl::GetFlag(FLAGS_worker_drain_timeout_s));
  eo.max_inbox_submissions = static_cast<size_t>(absl::GetFlag(FLAGS_max_waiting));
  if (absl::Status s = eo.Validate(); !s.ok()) {
    LOG(ERROR) << "bad flags: " << s.message();
    return 2;
  }

  ServiceMetrics metrics(mt.name());  // every series labelled model="<served name>"
  std::atomic<bool> started{false};
  std::atomic<bool> serving{false};  // the public health status, also /readyz
  std::unique_ptr<MetricsHttp> metrics_http;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    // Same interface as the gRPC ports (--host): 127.0.0.1 keeps everything on loopback.
    MetricsHttpOptions ho;
    ho.host = absl::GetFlag(FLAGS_host);
    ho.port = absl::GetFlag(FLAGS_metrics_port);
    ho.registry = metrics.registry();
    ho.constant_labels = metrics.constant_labels();  // weft_build_info's too
    ho.started = [&started] { return started.load(); };
    ho.ready = [&serving] { return serving.load(); };
    auto m = MetricsHttp::Start(std::move(ho));
    if (!m.ok()) {
      LOG(ERROR) << m.status().message();
      return 1;
    }
    metrics_http = std::move(*m);
  }

  absl::StatusOr<Edge> edge = LoadEdge();
  if (!edge.ok()) {
    LOG(ERROR) << edge.status().message();
    return 2;
  }
  const std::unique_ptr<BearerTokens>& tokens = edge->tokens;

  // Health per service ("", weft.v1.Generation, the model), registered as an ordinary
  // service so that reflection lists it (gRPC's built-in one is not).
  HealthService health({weft::v1::Generation::service_full_name(), mt.name()});
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::unique_ptr<grpc::Server> public_server;
  std::unique_ptr<OpenAiHttpServer> http;  // set before the engine starts
  Engine engine(eo, mt.expected_model(eo.core.block_size), mt.model_info(), &mt.text_source(),
                &metrics, [&health, &http, &serving](bool now_serving) {
                  serving = now_serving;
                  health.SetServing(now_serving);
                  if (http != nullptr) http->SetServing(now_serving);
                });

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
  fo.auth = tokens.get();
  // One front end for both public APIs: one token check, one stream limit, one
  // validator, one queue.
  GenerateFrontend frontend(fo, limits, &mt.encoder(), &engine, &metrics);
  GenerationService generation(&frontend);
  WorkerControlService control(&engine);

  int port = 0, worker_port = 0;
  const std::string host = absl::GetFlag(FLAGS_host);
  public_server = Serve(host, absl::GetFlag(FLAGS_port), edge->public_creds,
                        {&generation, &health}, &port, absl::GetFlag(FLAGS_max_message_bytes));
  std::unique_ptr<grpc::Server> worker_server = Serve(
      host, absl::GetFlag(FLAGS_worker_port), edge->worker_creds, {&control}, &worker_port,
      64 << 20);
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
    // The public surface is one: the gRPC port's TLS files; the frontend's tokens.
    ho.tls = edge->public_tls;
    auto h = OpenAiHttpServer::Start(ho, &frontend, &mt.text_source(), &metrics);
    if (!h.ok()) {
      LOG(ERROR) << h.status().message();
      return absl::IsInvalidArgument(h.status()) ? 2 : 1;
    }
    http = std::move(*h);
  }
  // NOT_SERVING until a replica attaches (HealthService starts so; so does /health).
  if (absl::Status s = engine.Start(); !s.ok()) {
    LOG(ERROR) << "cannot start: " << s.message();
    return 1;
  }
  started = true;
  LOG(INFO) << "weft-scheduler serving '" << mt.name() << "' on " << host << ":" << port
            << (edge->public_tls.enabled() ? " (TLS" : " (plaintext")
            << (edge->public_tls.client_ca.empty() ? "" : ", client certificates")
            << (tokens ? ", bearer tokens" : "")
            << "; workers attach on port " << worker_port
            << (edge->worker_tls.enabled() ? " with mutual TLS" : " in plaintext")
            << ", metrics on "
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
  health.Shutdown();  // NOT_SERVING for good; open Watch streams end
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
  weft::ParseFlags(argc, argv, "weft-scheduler --model=FILE.gguf [--port --worker_port ...]");
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  return weft::Main();
}

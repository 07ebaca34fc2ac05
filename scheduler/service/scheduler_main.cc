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
// SIGTERM/SIGINT: not ready at once, GOAWAY on the public port's connections (new calls
// UNAVAILABLE), running streams finish up to --drain_timeout_s, the rest end
// UNAVAILABLE, exit 0.
// HTTP on --metrics_port (common/metrics_http.h): /metrics; /livez 200 while the process
// runs; /startupz 200 once the ports are bound and the engine runs; /readyz 200 while
// the gRPC health is SERVING: a replica that does not drain is admitted and making
// progress, and the scheduler itself does not drain.
// A worker's SIGTERM drains its replica: no new sequences there, the running ones
// finish for up to --worker_drain_timeout_s, then the rest is re-queued on the other
// replicas with its generated tokens, and the worker is released.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/gguf.h"
#include "common/metrics_http.h"
#include "common/server_process.h"
#include "common/tls_credentials.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "scheduler/edge/bearer_tokens.h"
#include "scheduler/edge/generate_frontend.h"
#include "scheduler/edge/generation_service.h"
#include "scheduler/edge/http_server.h"
#include "scheduler/edge/model_text.h"
#include "scheduler/grammar/grammar_engine.h"
#include "scheduler/service/engine.h"
#include "scheduler/service/health_service.h"
#include "scheduler/service/scheduler_flags.h"
#include "scheduler/service/worker_control_service.h"

namespace weft {
namespace {

int Millis(absl::Duration d) {
  if (d <= absl::ZeroDuration()) return INT_MAX;  // gRPC's "never"
  return static_cast<int>(std::min<int64_t>(INT_MAX, absl::ToInt64Milliseconds(d)));
}

std::unique_ptr<grpc::Server> Serve(const std::string& host, int port,
                                    const std::shared_ptr<grpc::ServerCredentials>& creds,
                                    std::vector<grpc::Service*> services, int* bound,
                                    int64_t max_message, const GrpcPortLimits& limits) {
  grpc::ServerBuilder b;
  // gRPC sets SO_REUSEPORT by default: a second scheduler started on a taken port would
  // bind it too and silently take half of the new connections. Refuse, as the HTTP and
  // metrics servers do.
  b.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  b.AddListeningPort(absl::StrCat(host, ":", port), creds, bound);
  for (grpc::Service* service : services) b.RegisterService(service);
  b.SetMaxReceiveMessageSize(static_cast<int>(max_message));
  b.SetMaxSendMessageSize(256 << 20);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  b.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                       Millis(limits.min_ping_interval));
  b.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, limits.max_ping_strikes);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS,
                       limits.permit_pings_without_calls ? 1 : 0);
  b.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, limits.max_concurrent_streams);
  b.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, Millis(limits.max_connection_age));
  b.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                       Millis(limits.max_connection_age_grace));
  b.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, Millis(limits.max_connection_idle));
  b.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE, limits.max_metadata_bytes);
  return b.BuildAndStart();
}

// Both ports' credentials and the bearer tokens, loaded before anything is served (an
// error is a bad flag: exit 2).
struct Credentials {
  std::shared_ptr<grpc::ServerCredentials> public_creds;
  std::shared_ptr<grpc::ServerCredentials> worker_creds;
  std::unique_ptr<BearerTokens> tokens;  // null: no auth
};

absl::StatusOr<Credentials> LoadCredentials(const SchedulerBinaryOptions& o,
                                            ServiceMetrics* metrics) {
  Credentials c;
  auto public_creds = MakeServerCredentials(o.public_tls);
  if (!public_creds.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--tls_*: ", public_creds.status().message()));
  }
  c.public_creds = *public_creds;
  auto worker_creds = MakeServerCredentials(o.worker_tls);
  if (!worker_creds.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--worker_tls_*: ", worker_creds.status().message()));
  }
  c.worker_creds = *worker_creds;
  if (!o.auth_tokens_file.empty()) {
    BearerTokens::Options to;
    to.path = o.auth_tokens_file;
    to.on_failed_reload = [metrics] { metrics->auth_reload_failures.Increment(); };
    auto t = BearerTokens::Load(to);
    if (!t.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auth_tokens_file: ", t.status().message()));
    }
    c.tokens = std::move(*t);
    LOG(INFO) << "bearer tokens required (" << c.tokens->num_tokens() << " in "
              << o.auth_tokens_file << ")";
    if (!o.public_tls.enabled()) {
      LOG(WARNING) << "bearer tokens on a plaintext port: only safe behind a TLS-terminating "
                      "proxy or mesh (give --tls_cert/--tls_key otherwise)";
    }
  }
  if (!o.worker_tls.enabled()) {
    LOG(WARNING) << "the attach port is plaintext: any host that reaches it can attach as a "
                    "worker (give --worker_tls_cert/--worker_tls_key/--worker_tls_ca)";
  }
  return c;
}

void WritePortsFile(const std::string& path, int port, int worker_port, int metrics_port,
                    int http_port) {
  if (path.empty()) return;
  std::ofstream(path + ".tmp") << "{\"port\": " << port << ", \"worker_port\": " << worker_port
                               << ", \"metrics_port\": " << metrics_port
                               << ", \"http_port\": " << http_port << "}\n";
  std::rename((path + ".tmp").c_str(), path.c_str());
}

// The probes and /metrics (up before the engine: liveness answers at once).
absl::StatusOr<std::unique_ptr<MetricsHttp>> StartMetrics(const SchedulerBinaryOptions& o,
                                                          ServiceMetrics* metrics,
                                                          const std::atomic<bool>* started,
                                                          const std::atomic<bool>* serving) {
  if (o.metrics_port < 0) return nullptr;
  MetricsHttpOptions ho;
  ho.host = o.host;  // the gRPC ports' interface: 127.0.0.1 keeps everything on loopback
  ho.port = o.metrics_port;
  ho.registry = metrics->registry();
  ho.constant_labels = metrics->constant_labels();  // weft_build_info's too
  ho.started = [started] { return started->load(); };
  ho.ready = [serving] { return serving->load(); };
  return MetricsHttp::Start(std::move(ho));
}

// SIGTERM/SIGINT: not ready at once, running streams finish up to --drain_timeout_s, the
// rest end UNAVAILABLE; then every server stops.
void DrainAndStop(absl::Duration drain_timeout, Engine* engine, OpenAiHttpServer* http,
                  HealthService* health, grpc::Server* public_server, grpc::Server* worker_server) {
  const int sig = WaitForStopSignal();
  LOG(INFO) << "signal " << sig << ": draining for up to " << absl::FormatDuration(drain_timeout);
  const absl::Time drain_deadline = absl::Now() + drain_timeout;
  engine->BeginDrain();
  // GOAWAY on every public connection at once: the listener closes, clients (and
  // proxies) move to another scheduler, the running calls go on until the drain ends.
  // The health check then fails to connect (UNAVAILABLE) instead of answering
  // NOT_SERVING: either way a probe takes the scheduler out; /readyz says 503.
  std::thread goaway([public_server, drain_deadline] {
    public_server->Shutdown(absl::ToChronoTime(drain_deadline + absl::Seconds(2)));
  });
  const int ended = engine->WaitDrained(drain_deadline);
  engine->Stop();
  if (http != nullptr) http->Stop();
  health->Shutdown();  // NOT_SERVING for good; open Watch streams end
  goaway.join();  // every public call has ended (engine->Stop ended the rest)
  worker_server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  LOG(INFO) << "stopped (" << ended << " streams ended by the drain timeout)";
}

// Everything but the flags and the model: serves until a stop signal. Exit status.
int Serve(SchedulerBinaryOptions& o, const ModelText& mt) {
  if (o.batch_io_threads) {
    // Before any thread starts: they inherit it (common/server_process.h).
    if (absl::Status s = SetThisThreadClass(ThreadClass::kBatch); !s.ok()) {
      LOG(WARNING) << "--batch_io_threads: " << s.message() << " (threads stay SCHED_OTHER)";
    }
  }
  ServiceMetrics metrics(mt.name());  // every series labelled model="<served name>"
  std::atomic<bool> started{false};
  std::atomic<bool> serving{false};  // the public health status, also /readyz
  auto metrics_http = StartMetrics(o, &metrics, &started, &serving);
  if (!metrics_http.ok()) {
    LOG(ERROR) << metrics_http.status().message();
    return 1;
  }
  absl::StatusOr<Credentials> creds = LoadCredentials(o, &metrics);
  if (!creds.ok()) {
    LOG(ERROR) << creds.status().message();
    return 2;
  }
  // Health per service ("", weft.v1.Generation, the model), registered as an ordinary
  // service so that reflection lists it (gRPC's built-in one is not).
  HealthService health({weft::v1::Generation::service_full_name(), mt.name()});
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  // Structured output: XGrammar over the served vocabulary (masks as wide as the
  // request contract's vocabulary, which the workers' logits must equal).
  auto grammars = GrammarEngine::Create(
      GrammarVocabFromTokenizer(mt.tokenizer(), o.engine.core.limits.vocab_size,
                                mt.encoder().tool_call_format()),
      o.grammar);
  if (!grammars.ok()) {
    LOG(ERROR) << grammars.status().message();
    return 1;
  }
  std::unique_ptr<OpenAiHttpServer> http;  // set before the engine starts
  ExpectedModel expected = mt.expected_model(o.engine.core.block_size);
  expected.max_worker_kv_blocks = o.max_worker_kv_blocks;
  expected.max_total_kv_blocks = o.max_total_kv_blocks;
  expected.max_replicas = o.max_replicas;
  Engine engine(o.engine, std::move(expected), mt.model_info(),
                &mt.text_source(), &metrics, [&health, &http, &serving](bool now_serving) {
                  serving = now_serving;
                  health.SetServing(now_serving);
                  if (http != nullptr) http->SetServing(now_serving);
                });
  engine.set_grammar_service(grammars->get());
  // One front end for both public APIs: one token check, one stream limit, one request
  // contract (the core's limits), one queue.
  o.frontend.auth = creds->tokens.get();
  GenerateFrontend frontend(o.frontend, o.engine.core.limits, &mt.encoder(), &engine, &metrics);
  GenerationService generation(&frontend);
  WorkerControlService control(&engine);
  int port = 0, worker_port = 0;
  std::unique_ptr<grpc::Server> public_server = Serve(
      o.host, o.port, creds->public_creds, {&generation, &health}, &port, o.max_message_bytes,
      o.public_grpc);
  std::unique_ptr<grpc::Server> worker_server = Serve(
      o.host, o.worker_port, creds->worker_creds, {&control}, &worker_port, 64 << 20, o.attach_grpc);
  if (public_server == nullptr || worker_server == nullptr || port == 0 || worker_port == 0) {
    LOG(ERROR) << "cannot bind the gRPC ports (" << o.port << ", " << o.worker_port
               << "): in use?";
    return 1;
  }
  if (o.http) {
    auto h = OpenAiHttpServer::Start(o.http_server, &frontend, &mt.text_source(), &metrics);
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
  const int metrics_port = *metrics_http ? (*metrics_http)->port() : -1;
  const int http_port = http ? http->port() : -1;
  LOG(INFO) << "weft-scheduler serving '" << mt.name() << "' on " << o.host << ":" << port
            << (o.public_tls.enabled() ? " (TLS" : " (plaintext")
            << (o.public_tls.client_ca.empty() ? "" : ", client certificates")
            << (creds->tokens ? ", bearer tokens" : "") << "; workers attach on port "
            << worker_port << (o.worker_tls.enabled() ? " with mutual TLS" : " in plaintext")
            << ", metrics on " << metrics_port << ", OpenAI HTTP API on " << http_port
            << ", policy " << PolicyKindName(o.engine.core.policy) << ")";
  WritePortsFile(o.ports_file, port, worker_port, metrics_port, http_port);
  DrainAndStop(o.drain_timeout, &engine, http.get(), &health, public_server.get(),
               worker_server.get());
  return 0;
}

int Main() {
  absl::StatusOr<SchedulerBinaryOptions> o = OptionsFromFlags();
  if (!o.ok()) {
    LOG(ERROR) << "bad flags: " << o.status().message();
    return 2;
  }
  // Metadata only (header, vocabulary, tensor table): no weight page is mapped or read,
  // so the scheduler's memory and its pod's download do not grow with the model.
  auto file = GgufFile::OpenMetadata(o->model_path);
  if (!file.ok()) {
    LOG(ERROR) << "cannot load the model: " << file.status().message();
    return 1;
  }
  auto text = ModelText::Load(**file, o->model_name, o->chat_template_path);
  if (!text.ok()) {
    LOG(ERROR) << "cannot load the model's tokenizer/metadata: " << text.status().message();
    return 1;
  }
  const ModelText& mt = **text;
  if (absl::Status s = ApplyModel(mt.vocab_size(), mt.context_length(), mt.eos_token_ids(), &*o);
      !s.ok()) {
    LOG(ERROR) << "bad flags: " << s.message();
    return 2;
  }
  return Serve(*o, mt);
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  weft::InitServerProcess(argc, argv,
                          "weft-scheduler --model=FILE.gguf [--port --worker_port ...]");
  return weft::Main();
}

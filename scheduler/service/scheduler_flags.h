// weft-scheduler's command line: its flags (defined in scheduler_flags.cc) and
// OptionsFromFlags, which turns them into the options every part of the binary is built
// from — the engine and its scheduler core (with the request contract's limits, defined
// once here for the core and the edge), the public edge (frontend, HTTP API, TLS files,
// tokens file), the ports — without touching the model, the network or the disk.
// main (scheduler_main.cc) only adds what the model says (ApplyModel) and wires.
// Thread-safety: call from main's thread (reads the flags).
#ifndef WEFT_SCHEDULER_SERVICE_SCHEDULER_FLAGS_H_
#define WEFT_SCHEDULER_SERVICE_SCHEDULER_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tls_credentials.h"
#include "scheduler/grammar/grammar_engine.h"
#include "scheduler/edge/generate_frontend.h"
#include "scheduler/edge/http_server.h"
#include "scheduler/service/engine.h"

namespace weft {

// The HTTP/2 limits a gRPC port is built with (set explicitly, never gRPC's defaults).
// A zero duration is "off" (gRPC's infinity).
struct GrpcPortLimits {
  int max_concurrent_streams = 100;  // per connection
  absl::Duration max_connection_age;
  absl::Duration max_connection_age_grace;
  absl::Duration max_connection_idle;
  absl::Duration min_ping_interval = absl::Seconds(5);  // a client pinging faster is struck
  int max_ping_strikes = 2;                              // then GOAWAY
  bool permit_pings_without_calls = true;
  int max_metadata_bytes = 8 << 10;                      // request headers (metadata)
};

struct SchedulerBinaryOptions {
  std::string model_path;
  std::string model_name;  // --model_name, else the file's stem (DefaultModelName)
  std::string chat_template_path;  // --chat_template: replaces the GGUF's ("" = the GGUF's)
  std::string host;
  int port = 0;              // public gRPC
  int worker_port = 0;       // attach
  int metrics_port = -1;     // -1: off
  bool http = false;         // --http_port >= 0
  std::string ports_file;
  int64_t max_message_bytes = 0;
  absl::Duration drain_timeout;
  // Threads started by Serve (gRPC's, the HTTP servers') run SCHED_BATCH; the planning
  // thread sets itself back (Engine).
  bool batch_io_threads = true;
  EngineOptions engine;      // core.limits lacks the model's vocabulary and context
  GrammarEngineOptions grammar;  // structured output's compiler (--grammar_compile_timeout_s)
  FrontendOptions frontend;  // model_name and auth set later
  HttpServerOptions http_server;  // tls: the public port's
  ServerTlsFiles public_tls;
  ServerTlsFiles worker_tls;
  std::string auth_tokens_file;  // "": no bearer tokens
  // What a worker's hello may announce (ExpectedModel's limits; the rest of ExpectedModel
  // comes from the model).
  int32_t max_worker_kv_blocks = 0;
  int64_t max_total_kv_blocks = 0;
  int32_t max_replicas = 0;
  GrpcPortLimits public_grpc;  // --port
  GrpcPortLimits attach_grpc;  // --worker_port
};

// True for an address only this host can reach (127.0.0.0/8, ::1, localhost).
bool IsLoopbackHost(const std::string& host);

// The flags' values as options; INVALID_ARGUMENT naming the flag for a bad one (exit 2).
absl::StatusOr<SchedulerBinaryOptions> OptionsFromFlags();

// What the model adds — its vocabulary, context and end tokens — into the request
// limits and the core; then the engine's options are validated as a whole (INVALID_ARGUMENT:
// a bad flag only the model shows, e.g. --block_size against the context).
absl::Status ApplyModel(int32_t vocab_size, int32_t context_length,
                        const std::vector<int32_t>& eos_token_ids,
                        SchedulerBinaryOptions* options);

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_SCHEDULER_FLAGS_H_

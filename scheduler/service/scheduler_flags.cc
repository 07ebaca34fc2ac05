#include "scheduler/service/scheduler_flags.h"

#include <algorithm>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "scheduler/edge/model_text.h"

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
          "HTTP connections served at once (one thread each); more are answered 503 at once");
ABSL_FLAG(int32_t, http_request_timeout_s, 30,
          "HTTP: a request's head and body must arrive within this many seconds of its first "
          "byte (408 otherwise; slow clients cannot hold a connection's thread longer)");
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
ABSL_FLAG(int32_t, grammar_mask_threads, 2,
          "structured output: threads computing next-token masks as tokens come back "
          "(0: on the planning thread)");
ABSL_FLAG(int32_t, grammar_mask_wait_us, 1000,
          "structured output: how long one plan waits for masks not ready yet before those "
          "rows wait a step");
ABSL_FLAG(double, grammar_compile_timeout_s, 10,
          "structured output: a constraint not compiled this long after it was asked for is "
          "refused (INVALID_ARGUMENT); compile time grows with the vocabulary (Gemma 3's "
          "262,144 tokens: 4-7x as long as SmolLM2's 49,152)");
ABSL_FLAG(double, step_deadline_floor_s, 10, "step deadline floor (seconds)");
ABSL_FLAG(double, step_deadline_k, 8, "step deadline = max(floor, k x s/token x tokens)");
ABSL_FLAG(double, stall_timeout_s, 10, "end a stream whose client stops reading this long");
ABSL_FLAG(int32_t, stream_interval_tokens, 8,
          "most tokens one stream message carries at large batches: a sample's tokens wait "
          "for its next ones while a step feeds >= --stream_interval_min_streams streams, the "
          "sample's tokens come fast (3 step gaps fit in --stream_interval_max_hold_ms; N-1 "
          "for N < 4) and the next is expected before its oldest held token has waited "
          "--stream_interval_max_hold_ms; a stream's first message and a sample's last go out "
          "at once. Fewer stream writes (the scheduler's largest CPU cost per token) for up "
          "to that hold of latency at large batches; 1 sends every step's tokens as they come");
ABSL_FLAG(int32_t, stream_interval_min_streams, 64,
          "--stream_interval_tokens holds tokens only in steps that feed at least this many "
          "streams (smaller batches get every token as it comes); 1: at any batch");
ABSL_FLAG(double, stream_interval_max_hold_ms, 25,
          "the longest a token is held for --stream_interval_tokens (about: checked every "
          "quarter of it); tokens are not held while 3 step gaps do not fit in it");
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
          "bearer tokens, one a line ('#' comments), each optionally followed by its tenant "
          "and limits: tenant=NAME max_streams=N max_priority=P tokens_per_minute=T; re-read "
          "when the file changes (deleted or bad: no token accepted until it is good again); "
          "gRPC Generate/ListModels and HTTP /v1/* without one of them are UNAUTHENTICATED / "
          "401 (health stays open; empty: no auth)");
ABSL_FLAG(std::string, worker_tls_cert, "",
          "attach port: PEM certificate chain (mutual TLS with --worker_tls_key/--worker_tls_ca)");
ABSL_FLAG(std::string, worker_tls_key, "", "attach port: PEM private key of --worker_tls_cert");
ABSL_FLAG(std::string, worker_tls_ca, "",
          "attach port: PEM CA bundle; a worker must present a certificate it signed");
// gRPC's HTTP/2 limits, explicit on both ports (gRPC 1.51's defaults are not a policy).
ABSL_FLAG(int32_t, grpc_max_concurrent_streams, 100,
          "public gRPC port: concurrent streams per HTTP/2 connection (SETTINGS); more wait");
ABSL_FLAG(double, grpc_max_connection_age_s, 3600,
          "public gRPC port: a connection older than this gets GOAWAY (0 = never); clients "
          "reconnect, which also rebalances them behind a proxy");
ABSL_FLAG(double, grpc_max_connection_age_grace_s, 600,
          "public gRPC port: after that GOAWAY, how long its running calls may finish");
ABSL_FLAG(double, grpc_max_connection_idle_s, 600,
          "public gRPC port: a connection with no call this long gets GOAWAY (0 = never)");
ABSL_FLAG(int32_t, attach_max_concurrent_streams, 4,
          "attach port: concurrent streams per connection (a worker uses one Attach stream; "
          "its age and idle limits are off: the stream lives as long as the worker)");
ABSL_FLAG(double, grpc_min_ping_interval_s, 5,
          "both gRPC ports: keepalive pings closer than this are strikes; "
          "--grpc_max_ping_strikes of them end the connection (GOAWAY)");
ABSL_FLAG(bool, batch_io_threads, true,
          "run gRPC's threads and the other I/O threads SCHED_BATCH (the planning thread stays "
          "SCHED_OTHER): a callback thread woken for each stream write then never preempts "
          "the planning thread mid-delivery on a busy machine (common/server_process.h)");
ABSL_FLAG(int32_t, grpc_max_ping_strikes, 2, "both gRPC ports: see --grpc_min_ping_interval_s");
ABSL_FLAG(bool, grpc_permit_pings_without_calls, true,
          "both gRPC ports: accept keepalive pings on a connection with no call");
ABSL_FLAG(int32_t, grpc_max_metadata_bytes, 8 << 10,
          "both gRPC ports: largest request metadata (headers) accepted");
ABSL_FLAG(int32_t, max_priority, 0,
          "highest request priority a caller may ask for when its tenant sets none (callers "
          "without --auth_tokens_file, tokens without max_priority=); above it: "
          "PERMISSION_DENIED. 0: only the tokens file can let a caller jump the queue or "
          "preempt others; lower priorities are always allowed");
ABSL_FLAG(bool, allow_insecure_attach, false,
          "serve the attach port in plaintext on a non-loopback --host (without "
          "--worker_tls_*); any host that reaches it can then attach as a worker. Without "
          "this flag such a scheduler refuses to start");
ABSL_FLAG(int32_t, max_worker_kv_blocks, 1 << 20,
          "most KV blocks one worker's hello may announce (the scheduler keeps ~45 bytes of "
          "bookkeeping per block); a worker announcing more is refused");
ABSL_FLAG(int64_t, max_total_kv_blocks, int64_t{4} << 20,
          "most KV blocks of all admitted replicas together; a worker that would go past it "
          "is refused");
ABSL_FLAG(int32_t, max_replicas, 64,
          "most replica names admitted or forming at once (each is a metric label); a worker "
          "of a new name beyond it is refused");

namespace weft {
namespace {

// The core's options from the flags; the model's part comes with ApplyModel.
absl::Status CoreFromFlags(SchedulerOptions* core, bool* steps_in_flight_by_backend) {
  absl::StatusOr<PolicyKind> policy = ParsePolicyKind(absl::GetFlag(FLAGS_policy));
  if (!policy.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--policy: ", policy.status().message()));
  }
  core->policy = *policy;
  core->block_size = absl::GetFlag(FLAGS_block_size);
  core->max_num_batched_tokens = absl::GetFlag(FLAGS_max_num_batched_tokens);
  core->max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
  core->enable_prefix_caching = absl::GetFlag(FLAGS_prefix_caching);
  core->grammar_mask_threads = absl::GetFlag(FLAGS_grammar_mask_threads);
  core->grammar_mask_wait = absl::Microseconds(absl::GetFlag(FLAGS_grammar_mask_wait_us));
  const int32_t steps_in_flight = absl::GetFlag(FLAGS_max_steps_in_flight);
  core->max_steps_in_flight = steps_in_flight == 0 ? 1 : steps_in_flight;
  *steps_in_flight_by_backend = steps_in_flight == 0;
  core->max_waiting = absl::GetFlag(FLAGS_max_waiting);
  core->max_retries = absl::GetFlag(FLAGS_max_retries);
  core->limits.max_tokens = absl::GetFlag(FLAGS_max_tokens_cap);
  // The samples of one request never outnumber what a replica runs at once: the one cap
  // a request is refused by, and the one its message reports.
  core->limits.max_n = std::min(core->limits.max_n, core->max_num_seqs);
  return absl::OkStatus();
}

absl::Duration SecondsFlag(double s) { return s > 0 ? absl::Seconds(s) : absl::ZeroDuration(); }

absl::Status GrpcLimitsFromFlags(GrpcPortLimits* pub, GrpcPortLimits* attach) {
  pub->max_concurrent_streams = absl::GetFlag(FLAGS_grpc_max_concurrent_streams);
  pub->max_connection_age = SecondsFlag(absl::GetFlag(FLAGS_grpc_max_connection_age_s));
  pub->max_connection_age_grace =
      SecondsFlag(absl::GetFlag(FLAGS_grpc_max_connection_age_grace_s));
  pub->max_connection_idle = SecondsFlag(absl::GetFlag(FLAGS_grpc_max_connection_idle_s));
  pub->min_ping_interval = SecondsFlag(absl::GetFlag(FLAGS_grpc_min_ping_interval_s));
  pub->max_ping_strikes = absl::GetFlag(FLAGS_grpc_max_ping_strikes);
  pub->permit_pings_without_calls = absl::GetFlag(FLAGS_grpc_permit_pings_without_calls);
  pub->max_metadata_bytes = absl::GetFlag(FLAGS_grpc_max_metadata_bytes);
  *attach = *pub;
  attach->max_concurrent_streams = absl::GetFlag(FLAGS_attach_max_concurrent_streams);
  attach->max_connection_age = attach->max_connection_age_grace = absl::ZeroDuration();
  attach->max_connection_idle = absl::ZeroDuration();
  if (pub->max_concurrent_streams < 1 || attach->max_concurrent_streams < 1 ||
      pub->max_metadata_bytes < 1024 || pub->max_ping_strikes < 0) {
    return absl::InvalidArgumentError(
        "--grpc_max_concurrent_streams and --attach_max_concurrent_streams must be >= 1, "
        "--grpc_max_metadata_bytes >= 1024, --grpc_max_ping_strikes >= 0");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SchedulerBinaryOptions> OptionsFromFlags() {
  SchedulerBinaryOptions o;
  o.model_path = absl::GetFlag(FLAGS_model);
  o.model_name = absl::GetFlag(FLAGS_model_name);
  if (o.model_name.empty()) o.model_name = DefaultModelName(o.model_path);
  if (absl::Status s = CheckModelName(o.model_name); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--model_name: ", s.message()));
  }
  o.chat_template_path = absl::GetFlag(FLAGS_chat_template);
  o.host = absl::GetFlag(FLAGS_host);
  o.port = absl::GetFlag(FLAGS_port);
  o.worker_port = absl::GetFlag(FLAGS_worker_port);
  o.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  o.ports_file = absl::GetFlag(FLAGS_ports_file);
  o.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  o.drain_timeout = absl::Seconds(absl::GetFlag(FLAGS_drain_timeout_s));
  o.batch_io_threads = absl::GetFlag(FLAGS_batch_io_threads);

  EngineOptions& eo = o.engine;
  if (absl::Status s = CoreFromFlags(&eo.core, &eo.steps_in_flight_by_backend); !s.ok()) return s;
  eo.step_deadline.floor = absl::Seconds(absl::GetFlag(FLAGS_step_deadline_floor_s));
  eo.step_deadline.k = absl::GetFlag(FLAGS_step_deadline_k);
  eo.stall_timeout = absl::Seconds(absl::GetFlag(FLAGS_stall_timeout_s));
  eo.stream_interval.tokens = absl::GetFlag(FLAGS_stream_interval_tokens);
  eo.stream_interval.min_streams = absl::GetFlag(FLAGS_stream_interval_min_streams);
  eo.stream_interval.max_hold =
      absl::Milliseconds(absl::GetFlag(FLAGS_stream_interval_max_hold_ms));
  eo.worker_drain_timeout = absl::Seconds(absl::GetFlag(FLAGS_worker_drain_timeout_s));
  eo.max_inbox_submissions = static_cast<size_t>(std::max(1, absl::GetFlag(FLAGS_max_waiting)));

  o.grammar.compile_timeout = SecondsFlag(absl::GetFlag(FLAGS_grammar_compile_timeout_s));
  if (absl::Status s = o.grammar.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--grammar_compile_timeout_s must be > 0: ", s.message()));
  }

  FrontendOptions& fo = o.frontend;
  fo.model_name = o.model_name;
  fo.max_streams = absl::GetFlag(FLAGS_max_streams);
  fo.default_max_priority = absl::GetFlag(FLAGS_max_priority);
  fo.stream_buffer_bytes =
      static_cast<size_t>(std::max<int64_t>(0, absl::GetFlag(FLAGS_stream_buffer_bytes)));
  if (absl::Status s = fo.Validate(); !s.ok()) return s;

  o.public_tls.cert = absl::GetFlag(FLAGS_tls_cert);
  o.public_tls.key = absl::GetFlag(FLAGS_tls_key);
  o.public_tls.client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  o.worker_tls.cert = absl::GetFlag(FLAGS_worker_tls_cert);
  o.worker_tls.key = absl::GetFlag(FLAGS_worker_tls_key);
  o.worker_tls.client_ca = absl::GetFlag(FLAGS_worker_tls_ca);
  if (o.worker_tls.enabled() &&
      (o.worker_tls.cert.empty() || o.worker_tls.key.empty() || o.worker_tls.client_ca.empty())) {
    return absl::InvalidArgumentError(
        "the attach port's TLS is mutual: give --worker_tls_cert, --worker_tls_key and "
        "--worker_tls_ca together");
  }
  if (!o.worker_tls.enabled() && !IsLoopbackHost(o.host) &&
      !absl::GetFlag(FLAGS_allow_insecure_attach)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the attach port would be plaintext on --host=", o.host,
        ": any host that reaches it could attach as a worker. Give --worker_tls_cert, "
        "--worker_tls_key and --worker_tls_ca (mutual TLS), bind --host=127.0.0.1, or accept "
        "it with --allow_insecure_attach (e.g. behind a NetworkPolicy)"));
  }
  o.max_worker_kv_blocks = absl::GetFlag(FLAGS_max_worker_kv_blocks);
  o.max_total_kv_blocks = absl::GetFlag(FLAGS_max_total_kv_blocks);
  o.max_replicas = absl::GetFlag(FLAGS_max_replicas);
  if (o.max_worker_kv_blocks < 1 || o.max_total_kv_blocks < o.max_worker_kv_blocks ||
      o.max_replicas < 1) {
    return absl::InvalidArgumentError(
        "--max_worker_kv_blocks and --max_replicas must be >= 1, and --max_total_kv_blocks >= "
        "--max_worker_kv_blocks");
  }
  o.auth_tokens_file = absl::GetFlag(FLAGS_auth_tokens_file);
  if (absl::Status s = GrpcLimitsFromFlags(&o.public_grpc, &o.attach_grpc); !s.ok()) return s;

  o.http = absl::GetFlag(FLAGS_http_port) >= 0;
  HttpServerOptions& ho = o.http_server;
  ho.host = o.host;
  ho.port = absl::GetFlag(FLAGS_http_port);
  ho.max_connections = absl::GetFlag(FLAGS_http_max_connections);
  ho.read_timeout = absl::Seconds(std::max(1, absl::GetFlag(FLAGS_http_request_timeout_s)));
  ho.max_body_bytes = static_cast<size_t>(std::max<int64_t>(0, o.max_message_bytes));
  // A client that stops reading: the same patience as the engine's stall guard.
  ho.write_timeout = std::max(absl::Seconds(1), eo.stall_timeout);
  ho.tls = o.public_tls;  // the public surface is one: the gRPC port's TLS files
  return o;
}

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || absl::StartsWith(host, "127.");
}

absl::Status ApplyModel(int32_t vocab_size, int32_t context_length,
                        const std::vector<int32_t>& eos_token_ids,
                        SchedulerBinaryOptions* options) {
  SchedulerOptions& core = options->engine.core;
  core.limits.vocab_size = vocab_size;
  core.limits.max_model_len = context_length;
  core.eos_token_ids = eos_token_ids;
  return options->engine.Validate();
}

}  // namespace weft

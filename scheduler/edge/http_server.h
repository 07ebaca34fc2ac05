// OpenAiHttpServer: weft-scheduler's OpenAI-compatible HTTP API (--http_port):
//   POST /v1/completions, POST /v1/chat/completions   JSON, or server-sent events with
//                                                     "stream": true (data: [DONE] last)
//   GET  /v1/models, /v1/models/{id}                  the served model
//   GET  /health                                      200 while serving, else 503 (as
//                                                     grpc.health.v1; never authenticated)
// A request is mapped by openai_json.h to a weft::v1::GenerateRequest and handed to the
// GenerateFrontend the gRPC service uses (same stream limit, validator, queue and
// engine); its Outbox is drained here instead of by a gRPC reactor. Errors are
// OpenAI-shaped JSON with the HTTP status of openai::HttpStatusFor. A streamed answer's
// status is chosen when its first token (or its end) is known, so an error that the
// engine finds before any token is still an HTTP error, not an in-band one; after the
// first token, an error is one `data: {"error": ...}` event before [DONE].
//
// Client disconnects: while a call waits for tokens, its connection's thread polls the
// socket for the peer's close (POLLRDHUP) together with an eventfd that the outbox
// signals, so a client that leaves — streaming or not — cancels its request at once and
// its KV blocks are freed. A client that stops reading is ended by the outbox's stall
// guard (CancelCall shuts the socket down) or the write timeout, whichever comes first.
//
// Library: cpp-httplib (Debian's 0.11.4, see README "OpenAI-compatible HTTP API" for the
// measurement and the choice) behind common/http_gate.h (GatedHttpServer), which owns
// the connection loop and every byte read: one thread per connection, started on demand
// up to max_connections, and one more connection is answered 503 at once; the request
// head is capped (max_header_bytes, max_header_fields: 431); the head and body must
// arrive within read_timeout (408, slowloris); a body with a Content-Encoding other
// than identity is refused (415: no decompressor runs on a client's bytes); the body is
// capped on the wire by the gate and exactly, after de-chunking, here (max_body_bytes:
// 413, reading stops there). While not serving (a drain, or no replica yet) every
// answer carries `Connection: close`. A handler finds its connection's socket through
// GatedHttpServer::CurrentSocket().
//
// The edge is the gRPC port's, shared rather than copied:
//  * bearer tokens: the GenerateFrontend's (FrontendOptions.auth, the BearerTokens of
//    --auth_tokens_file). Every /v1 route needs one; it is checked before any other
//    work — before a request body is even stored or parsed (a refused body is read
//    and dropped, so the keep-alive connection stays usable). A missing or unknown token
//    is 401 in OpenAI's error shape with "WWW-Authenticate: Bearer", and a generation
//    call refused so is counted in weft_requests_status_total as UNAUTHENTICATED, as on
//    gRPC;
//  * the x-weft-model header (what a proxy routes by): checked with the body's "model"
//    by GenerateFrontend::Start (CheckRequestedModel: they disagree -> 400, a model not
//    served -> 404); on /v1/models[/{id}] and /health a header naming another model is a
//    404, so a proxy's health check that names its model fails on a scheduler serving
//    another one;
//  * TLS: the public port's files (tls, ServerTlsFiles: --tls_cert/--tls_key, client
//    certificates with --tls_client_ca), reloaded as gRPC's are (http_tls.h).
// /health needs no token (probes, load balancers), like grpc.health.v1.
//
// Thread-safety: Start/Stop from one thread; SetServing from any.
#ifndef WEFT_SCHEDULER_SERVICE_HTTP_SERVER_H_
#define WEFT_SCHEDULER_SERVICE_HTTP_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/tls_credentials.h"
#include "scheduler/edge/generate_frontend.h"
#include "scheduler/service/metrics.h"
#include "scheduler/token_text_source.h"

namespace weft {

struct HttpServerOptions {
  std::string host = "0.0.0.0";
  int port = 8000;  // 0 = ephemeral
  // Connections served at once, one thread each; more are answered 503 at once.
  int max_connections = 512;
  // Request bodies over this (after de-chunking) are refused (413).
  size_t max_body_bytes = 4 << 20;
  // The request line and headers: bytes and header fields (431 past either).
  size_t max_header_bytes = 32 << 10;
  int max_header_fields = 100;
  // An idle keep-alive connection is closed after this.
  absl::Duration keep_alive_timeout = absl::Seconds(5);
  // Reading one request (its head and body, from its first byte: 408 past it), and one
  // write to a client that does not read.
  absl::Duration read_timeout = absl::Seconds(30);
  absl::Duration write_timeout = absl::Seconds(10);
  // HTTPS when tls.enabled() (the gRPC public port's files and reload interval).
  ServerTlsFiles tls;

  absl::Status Validate() const;
};

class OpenAiHttpServer {
 public:
  // Binds and starts serving. `frontend`, `text` (token bytes for logprobs) and
  // `metrics` (may be null: none; weft_http_*) outlive the server.
  static absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> Start(HttpServerOptions options,
                                                                 GenerateFrontend* frontend,
                                                                 const TokenTextSource* text,
                                                                 ServiceMetrics* metrics);
  ~OpenAiHttpServer();  // Stop()

  int port() const;
  // What /health answers (false until set); follows the gRPC health status.
  void SetServing(bool serving);
  // Stops accepting and waits for the connections' threads (calls still generating end
  // when the engine ends them; idle keep-alive connections within keep_alive_timeout).
  void Stop();

 private:
  class Impl;
  explicit OpenAiHttpServer(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_HTTP_SERVER_H_

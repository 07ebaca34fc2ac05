// GatedHttpServer: cpp-httplib's Server with the limits an exposed port needs and that
// Debian's cpp-httplib 0.11.4 cannot set. Debian ships it as a compiled library
// (libcpp-httplib.so, the header only declares), so its CPPHTTPLIB_* limits are fixed
// at Debian's build: per header *line* 8 KiB but any number of lines, a read timeout per
// recv() (a client trickling one byte per interval never times out), a body limit that
// is compared with Content-Length only (a chunked body, or a compressed one once
// inflated, is read whole), and a connection that waits in the accept queue, unanswered,
// once every thread is busy.
//
// How: the library lets a subclass replace `process_and_close_socket(sock)` (each
// accepted connection) and call the protected `process_request(Stream&, ...)` (one
// request on a Stream). So the connection loop here is ours and every byte the library
// reads comes through a Stream of ours (plain TCP or OpenSSL over the socket), which
// enforces, as bytes are read:
//   * connections: at most `max_connections` served at once; one more is answered 503
//     (`Connection: close`) at once by one of `overflow_threads` extra threads and closed
//     (a TLS connection over the cap is closed without a handshake);
//   * the request head (request line + headers): at most `max_header_bytes` bytes and
//     `max_header_fields` fields, else 431;
//   * one deadline, `request_timeout`, from a request's first byte to its body's last
//     (TLS handshake included for a connection's first request), else 408;
//   * `Content-Encoding` other than identity: 415 when the body is read (no decompressor
//     is ever run on a client's bytes: no zip bomb, and no OpenAI client compresses
//     requests);
//   * the body's bytes on the wire (chunk framing included) at most
//     `max_body_wire_bytes`, else 413. A handler that reads the body itself (a content
//     reader) caps the de-chunked bytes exactly and calls CloseAfterResponse().
// A refusal is written by the Stream itself (`Connection: close`), the library's own
// answer to the failed read is discarded, and the connection is closed after a short
// lingering read (so that the client reads the answer instead of a reset).
// While `close_connections()` holds (a drain) every answer carries `Connection: close`
// and the connection is closed after it.
//
// Ownership: the options' SSL_CTX (when set) outlives the server.
// Thread-safety: as httplib::Server; the static functions act on the calling
// connection thread's connection.
#ifndef WEFT_COMMON_HTTP_GATE_H_
#define WEFT_COMMON_HTTP_GATE_H_

#include <httplib.h>

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace prometheus {
class Gauge;
}  // namespace prometheus

namespace weft {

struct HttpGateOptions {
  int max_connections = 512;  // served at once (one thread each)
  int overflow_threads = 16;  // answer the 503s beyond max_connections
  size_t max_header_bytes = 32 << 10;
  int max_header_fields = 100;
  size_t max_body_wire_bytes = 8 << 20;
  absl::Duration request_timeout = absl::Seconds(30);    // head + body (+ TLS handshake)
  absl::Duration keep_alive_timeout = absl::Seconds(5);  // idle between requests
  absl::Duration write_timeout = absl::Seconds(10);      // one write to a client
  size_t keep_alive_max_requests = 100000;
  SSL_CTX* tls = nullptr;  // HTTPS when set (not owned)
  // Holds: every answer carries Connection: close (null: never).
  std::function<bool()> close_connections;
  // The body of a refusal the gate writes itself (null: the status line's reason as
  // text/plain). `content_type` is set alongside.
  std::function<std::string(int status, absl::string_view message)> error_body;
  std::string error_content_type = "application/json";
  prometheus::Gauge* busy = nullptr;  // connections served now (may be null)
  // Called with the status of each answer the gate writes itself (408, 413, 415, 431,
  // 503), on the connection's thread, before it is written (null: none). For a metric.
  std::function<void(int status)> on_refused;

  absl::Status Validate() const;
};

class GatedHttpServer : public httplib::Server {
 public:
  explicit GatedHttpServer(HttpGateOptions options);
  ~GatedHttpServer() override;

  // Stops accepting, wakes an accept loop waiting for a free thread, ends idle
  // keep-alive connections, and returns once listen_after_bind() can return.
  void Stop();

  // The socket of the connection the calling handler serves; -1 off a connection thread.
  static int CurrentSocket();
  // The calling handler's connection is closed after its answer (the handler left part
  // of the body unread; it sets `Connection: close` on its response).
  static void CloseAfterResponse();

  // Connections answered 503 (over the cap) so far.
  int64_t over_cap() const { return over_cap_.load(); }
  // Connections holding a slot now (one is released once its thread is done with it,
  // after the peer may already have seen the close).
  int active_connections() const { return active_.load(); }

 private:
  class Pool;
  bool process_and_close_socket(socket_t sock) override;
  void AnswerOverCap(int sock);

  const HttpGateOptions options_;
  std::atomic<int> active_{0};
  std::atomic<int64_t> over_cap_{0};
  Mutex pool_mu_;
  Pool* pool_ ABSL_GUARDED_BY(pool_mu_) = nullptr;  // owned by httplib while it listens
};

}  // namespace weft

#endif  // WEFT_COMMON_HTTP_GATE_H_

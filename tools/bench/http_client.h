// A minimal blocking HTTP/1.1 client over POSIX sockets, for streaming one POST
// response (llama-server's SSE) into an HttpResponseParser. No TLS, no redirects, no
// keep-alive: each call opens a connection and sends "Connection: close".
// Every wait (connect, send, recv) is a poll() bounded by the caller's deadline; no
// busy loops. Thread-safety: the functions are reentrant; one call per thread.
#ifndef WEFT_TOOLS_BENCH_HTTP_CLIENT_H_
#define WEFT_TOOLS_BENCH_HTTP_CLIENT_H_

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/bench/http_stream.h"

namespace weft {
namespace bench {

struct HttpEndpoint {
  std::string host;
  int port = 80;
  std::string path;  // "" when the URL had none
};

// Parses "http://host[:port][/path]" (IPv6 hosts in brackets).
absl::StatusOr<HttpEndpoint> ParseHttpUrl(absl::string_view url);

// POSTs `body` (Content-Type: application/json) to host:port/path and feeds the
// response to `parser` until it is complete, the peer closes, or `deadline` passes
// (DEADLINE_EXCEEDED). Transport failures are UNAVAILABLE; the HTTP status code is
// left to the caller (parser->status_code()).
absl::Status HttpPost(const HttpEndpoint& endpoint, absl::string_view path,
                      absl::string_view body, std::chrono::steady_clock::time_point deadline,
                      HttpResponseParser* parser);

}  // namespace bench
}  // namespace weft

#endif  // WEFT_TOOLS_BENCH_HTTP_CLIENT_H_

// libFuzzer target: arbitrary bytes sent as one client's connection to the OpenAI HTTP
// server (GatedHttpServer + cpp-httplib + the routes + openai_json + GenerateFrontend,
// the engine a FakeEngine that refuses every submission, so no call waits for tokens).
// Each input: connect, send the bytes, close the sending side, read until the server
// closes, and until its connection thread is done. Must never crash, and the server must
// close the connection by itself (the gate's deadline) rather than hang: a read that
// times out, or a connection thread still busy 10 s later, traps.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "scheduler/edge/generate_frontend.h"
#include "scheduler/edge/http_server.h"
#include "scheduler/edge/testing/byte_encoder.h"
#include "scheduler/service/metrics.h"
#include "scheduler/service/testing/fake_engine.h"

namespace {

struct Server {
  Server() {
    engine.reject_ = true;
    weft::RequestLimits lim;
    lim.vocab_size = 256;
    lim.max_model_len = 128;
    weft::FrontendOptions fo;
    fo.model_name = "fake";
    fo.max_streams = 4;
    frontend = std::make_unique<weft::GenerateFrontend>(fo, lim, &encoder, &engine, &metrics);
    weft::HttpServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.max_body_bytes = 64 << 10;
    o.read_timeout = absl::Seconds(2);
    o.keep_alive_timeout = absl::Seconds(1);
    o.write_timeout = absl::Seconds(2);
    auto s = weft::OpenAiHttpServer::Start(o, frontend.get(), nullptr, &metrics);
    if (!s.ok()) __builtin_trap();
    server = std::move(*s);
    server->SetServing(true);
  }
  weft::testing::ByteEncoder encoder;
  weft::testing::FakeEngine engine;
  weft::ServiceMetrics metrics{"fake"};
  std::unique_ptr<weft::GenerateFrontend> frontend;
  std::unique_ptr<weft::OpenAiHttpServer> server;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Server* server = new Server();  // lives for the process
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(server->server->port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) __builtin_trap();
  timeval tv{10, 0};  // over the gate's 2 s deadline and 1 s linger
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server refused and closed
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n > 0) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) __builtin_trap();  // hung
    break;
  }
  close(fd);
  // The connection's thread is done with it (the busy gauge is decremented after the
  // gate's cleanup): nothing of this input runs on when the next starts, or at exit.
  const absl::Time guard = absl::Now() + absl::Seconds(10);
  while (server->metrics.http_connections.Value() > 0) {
    if (absl::Now() > guard) __builtin_trap();  // a connection thread hung
    absl::SleepFor(absl::Microseconds(100));
  }
  return 0;
}

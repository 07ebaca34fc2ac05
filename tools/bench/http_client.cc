#include "tools/bench/http_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace weft {
namespace bench {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status Errno(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// Waits until fd is ready for `events` or the deadline passes.
absl::Status WaitFd(int fd, short events, Clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    if (left.count() <= 0) return absl::DeadlineExceededError("HTTP request timed out");
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 60000)));
    if (n > 0) return absl::OkStatus();
    if (n < 0 && errno != EINTR) return Errno("poll");
  }
}

// Connects with a deadline (non-blocking connect, then poll for writability).
absl::StatusOr<int> Connect(const HttpEndpoint& ep, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = absl::StrCat(ep.port);
  const int rc = getaddrinfo(ep.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("resolve ", ep.host, ": ", gai_strerror(rc)));
  }
  absl::Cleanup free_res = [res] { freeaddrinfo(res); };
  absl::Status last = absl::UnavailableError("no address");
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                          ai->ai_protocol);
    if (fd < 0) {
      last = Errno("socket");
      continue;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last = Errno(absl::StrCat("connect ", ep.host, ":", ep.port));
      close(fd);
      continue;
    }
    last = WaitFd(fd, POLLOUT, deadline);
    int err = 0;
    socklen_t len = sizeof(err);
    if (last.ok() && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err != 0) {
      errno = err;
      last = Errno(absl::StrCat("connect ", ep.host, ":", ep.port));
    }
    if (!last.ok()) {
      close(fd);
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
  }
  return last;
}

absl::Status SendAll(int fd, absl::string_view data, Clock::time_point deadline) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      absl::Status s = WaitFd(fd, POLLOUT, deadline);
      if (!s.ok()) return s;
      continue;
    }
    return Errno("send");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HttpEndpoint> ParseHttpUrl(absl::string_view url) {
  HttpEndpoint ep;
  if (!absl::ConsumePrefix(&url, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat("not an http:// URL: ", url));
  }
  const size_t slash = url.find('/');
  absl::string_view hostport = url.substr(0, slash);
  if (slash != absl::string_view::npos) ep.path = std::string(url.substr(slash));
  absl::string_view port;
  if (absl::ConsumePrefix(&hostport, "[")) {  // [v6]:port
    const size_t close = hostport.find(']');
    if (close == absl::string_view::npos) return absl::InvalidArgumentError("bad IPv6 host");
    ep.host = std::string(hostport.substr(0, close));
    port = hostport.substr(close + 1);
    if (!port.empty() && !absl::ConsumePrefix(&port, ":")) {
      return absl::InvalidArgumentError("bad host:port");
    }
  } else {
    const size_t colon = hostport.rfind(':');
    ep.host = std::string(hostport.substr(0, colon));
    if (colon != absl::string_view::npos) port = hostport.substr(colon + 1);
  }
  if (ep.host.empty()) return absl::InvalidArgumentError("URL without a host");
  if (!port.empty() && (!absl::SimpleAtoi(port, &ep.port) || ep.port < 1 || ep.port > 65535)) {
    return absl::InvalidArgumentError(absl::StrCat("bad port in ", url));
  }
  return ep;
}

absl::Status HttpPost(const HttpEndpoint& endpoint, absl::string_view path,
                      absl::string_view body, Clock::time_point deadline,
                      HttpResponseParser* parser) {
  absl::StatusOr<int> fd_or = Connect(endpoint, deadline);
  if (!fd_or.ok()) return fd_or.status();
  const int fd = *fd_or;
  absl::Cleanup close_fd = [fd] { close(fd); };

  const bool v6 = absl::StrContains(endpoint.host, ':');
  const std::string head = absl::StrCat(
      "POST ", path, " HTTP/1.1\r\nHost: ", v6 ? "[" : "", endpoint.host, v6 ? "]" : "", ":",
      endpoint.port, "\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n",
      "Connection: close\r\nContent-Length: ", body.size(), "\r\n\r\n");
  absl::Status s = SendAll(fd, head, deadline);
  if (s.ok()) s = SendAll(fd, body, deadline);
  if (!s.ok()) return s;

  char buf[16384];
  while (!parser->done()) {
    if (Clock::now() >= deadline) return absl::DeadlineExceededError("HTTP request timed out");
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      absl::Status fs = parser->Feed(absl::string_view(buf, static_cast<size_t>(n)));
      if (!fs.ok()) return fs;
      continue;
    }
    if (n == 0) return parser->OnEof();
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      absl::Status ws = WaitFd(fd, POLLIN, deadline);
      if (!ws.ok()) return ws;
      continue;
    }
    return Errno("recv");
  }
  return absl::OkStatus();
}

}  // namespace bench
}  // namespace weft

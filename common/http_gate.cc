#include "common/http_gate.h"

#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <cerrno>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "prometheus/gauge.h"

namespace weft {
namespace {

constexpr size_t kReadBuffer = 16 << 10;
// After a refusal: what is read (and dropped) before closing, so that the client reads
// the answer rather than a reset caused by its own unread bytes.
constexpr size_t kLingerBytes = 1 << 20;
constexpr absl::Duration kLingerTime = absl::Seconds(1);
// The same for a connection over the cap, answered before it sent anything perhaps:
// short, so that a flood of idle connections does not hold the overflow threads (its
// request, when it comes later, meets a reset, with the 503 already in its buffer).
constexpr absl::Duration kOverCapLingerTime = absl::Milliseconds(50);
// How often an idle connection looks whether the server stops.
constexpr int kIdleSliceMs = 100;

const char* Reason(int status) {
  switch (status) {
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

int PollMs(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
}

// Waits for `events` on `fd` until `deadline`: > 0 ready, 0 timed out, < 0 error.
int WaitFd(int fd, short events, absl::Time deadline) {
  for (;;) {
    pollfd p = {fd, events, 0};
    const int n = ::poll(&p, 1, PollMs(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n > 0 && (p.revents & (POLLERR | POLLNVAL)) && !(p.revents & events)) return -1;
    return n;
  }
}

std::string Endpoint(int fd, bool peer, int* port) {
  sockaddr_storage addr;
  socklen_t len = sizeof addr;
  const int r = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                     : getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  char host[NI_MAXHOST];
  char serv[NI_MAXSERV];
  if (r != 0 || getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof host, serv,
                            sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    *port = -1;
    return "";
  }
  *port = std::atoi(serv);
  return host;
}

// One connection: the bytes the library reads and writes, with the gate's limits.
class GateStream final : public httplib::Stream {
 public:
  GateStream(int fd, SSL* ssl, const HttpGateOptions& o) : fd_(fd), ssl_(ssl), o_(o) {}

  // Idle wait for the next request (bytes already buffered count). False: the client
  // left, `keep_alive_timeout` passed, or `stopping()` turned true.
  bool WaitForRequest(const std::function<bool()>& stopping) {
    if (begin_ < end_ || (ssl_ != nullptr && SSL_pending(ssl_) > 0)) return true;
    const absl::Time until = absl::Now() + o_.keep_alive_timeout;
    while (!stopping()) {
      const absl::Time slice = std::min(until, absl::Now() + absl::Milliseconds(kIdleSliceMs));
      const int n = WaitFd(fd_, POLLIN, slice);
      if (n != 0) return n > 0;
      if (absl::Now() >= until) return false;
    }
    return false;
  }

  // A request starts: its head is scanned from the next byte, its deadline runs.
  void BeginRequest() {
    deadline_ = absl::Now() + o_.request_timeout;
    in_head_ = true;
    head_bytes_ = 0;
    fields_ = 0;
    line_.clear();
    bad_encoding_ = false;
    body_bytes_ = 0;
  }
  void SetDeadline(absl::Time t) { deadline_ = t; }

  bool refused() const { return refused_; }
  bool close_after() const { return close_after_; }
  void set_close_after() { close_after_ = true; }

  // The gate's own answer; the connection reads and writes nothing more after it.
  void Refuse(int status, absl::string_view message) {
    if (refused_) return;
    refused_ = true;
    if (o_.on_refused) o_.on_refused(status);
    std::string body =
        o_.error_body ? o_.error_body(status, message) : absl::StrCat(Reason(status), "\n");
    const std::string type = o_.error_body ? o_.error_content_type : "text/plain";
    const std::string head =
        absl::StrCat("HTTP/1.1 ", status, " ", Reason(status), "\r\nContent-Type: ", type,
                     "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n");
    (void)WriteAll(head + body);
  }

  // Reads and drops what the client still sends, briefly (see kLingerBytes).
  void Linger(absl::Duration patience = kLingerTime) {
    if (ssl_ == nullptr) ::shutdown(fd_, SHUT_WR);
    const absl::Time until = absl::Now() + patience;
    size_t dropped = 0;
    char buf[kReadBuffer];
    while (dropped < kLingerBytes && WaitFd(fd_, POLLIN, until) > 0) {
      const ssize_t n = ssl_ != nullptr ? SSL_read(ssl_, buf, sizeof buf)
                                        : ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      dropped += static_cast<size_t>(n);
    }
  }

  bool is_readable() const override {
    return begin_ < end_ || WaitFd(fd_, POLLIN, deadline_) > 0;
  }
  bool is_writable() const override {
    return !refused_ && WaitFd(fd_, POLLOUT, absl::Now() + o_.write_timeout) > 0;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (refused_) return -1;
    if (begin_ == end_) {
      const ssize_t n = Fill();
      if (n <= 0) return n;
    }
    size_t n = std::min(size, end_ - begin_);
    if (in_head_) {
      n = ScanHead(n);
      if (refused_) return -1;
    } else {
      if (bad_encoding_) {
        Refuse(415, "Content-Encoding other than identity is not accepted");
        return -1;
      }
      body_bytes_ += n;
      if (body_bytes_ > o_.max_body_wire_bytes) {
        Refuse(413, "the request body is too large");
        return -1;
      }
    }
    std::memcpy(ptr, buf_ + begin_, n);
    begin_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (refused_) return static_cast<ssize_t>(size);  // the gate answered already
    return WriteSome(ptr, size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = Endpoint(fd_, true, &port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = Endpoint(fd_, false, &port);
  }
  socket_t socket() const override { return fd_; }

 private:
  // Scans the head bytes about to be handed out (n of them, from begin_); returns how
  // many belong to the head (the rest is body, counted by the next read).
  size_t ScanHead(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const char c = buf_[begin_ + i];
      if (++head_bytes_ > o_.max_header_bytes) {
        Refuse(431, absl::StrCat("the request head is over ", o_.max_header_bytes, " bytes"));
        return 0;
      }
      if (c != '\n') {
        if (line_.size() < 256) line_.push_back(c);  // enough to see a header's name
        continue;
      }
      absl::string_view line = absl::StripTrailingAsciiWhitespace(line_);
      if (line.empty() && head_bytes_ > 2) {
        in_head_ = false;
        return i + 1;
      }
      if (++fields_ > o_.max_header_fields + 1) {  // + the request line
        Refuse(431, absl::StrCat("more than ", o_.max_header_fields, " header fields"));
        return 0;
      }
      if (absl::StartsWithIgnoreCase(line, "content-encoding:")) {
        const absl::string_view v = absl::StripAsciiWhitespace(line.substr(17));
        if (!v.empty() && !absl::EqualsIgnoreCase(v, "identity")) bad_encoding_ = true;
      }
      line_.clear();
    }
    return n;
  }

  // Reads more bytes into the empty buffer: > 0 read, 0 end of stream, -1 error or
  // the deadline (answered 408).
  ssize_t Fill() {
    begin_ = end_ = 0;
    for (;;) {
      ssize_t n;
      short want = POLLIN;
      if (ssl_ != nullptr) {
        n = SSL_read(ssl_, buf_, sizeof buf_);
        if (n > 0) {
          end_ = static_cast<size_t>(n);
          return n;
        }
        const int e = SSL_get_error(ssl_, static_cast<int>(n));
        if (e == SSL_ERROR_ZERO_RETURN) return 0;
        if (e == SSL_ERROR_WANT_WRITE) {
          want = POLLOUT;
        } else if (e != SSL_ERROR_WANT_READ) {
          return -1;
        }
      } else {
        n = ::recv(fd_, buf_, sizeof buf_, 0);
        if (n > 0) {
          end_ = static_cast<size_t>(n);
          return n;
        }
        if (n == 0) return 0;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      }
      const int r = WaitFd(fd_, want, deadline_);
      if (r < 0) return -1;
      if (r == 0) {
        Refuse(408, "the request was not received in time");
        return -1;
      }
    }
  }

  ssize_t WriteSome(const char* p, size_t size) {
    const absl::Time until = absl::Now() + o_.write_timeout;
    for (;;) {
      short want = POLLOUT;
      if (ssl_ != nullptr) {
        const int n = SSL_write(ssl_, p, static_cast<int>(std::min<size_t>(size, 1 << 30)));
        if (n > 0) return n;
        const int e = SSL_get_error(ssl_, n);
        if (e == SSL_ERROR_WANT_READ) {
          want = POLLIN;
        } else if (e != SSL_ERROR_WANT_WRITE) {
          return -1;
        }
      } else {
        const ssize_t n = ::send(fd_, p, size, MSG_NOSIGNAL);
        if (n >= 0) return n;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      }
      if (WaitFd(fd_, want, until) <= 0) return -1;
    }
  }

  bool WriteAll(absl::string_view s) {
    while (!s.empty()) {
      const ssize_t n = WriteSome(s.data(), s.size());
      if (n <= 0) return false;
      s.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  const int fd_;
  SSL* const ssl_;
  const HttpGateOptions& o_;
  char buf_[kReadBuffer];
  size_t begin_ = 0, end_ = 0;
  absl::Time deadline_ = absl::InfiniteFuture();
  bool in_head_ = true;
  size_t head_bytes_ = 0;
  int fields_ = 0;
  std::string line_;  // the head's current line (its first 256 bytes)
  bool bad_encoding_ = false;
  size_t body_bytes_ = 0;
  bool refused_ = false;
  bool close_after_ = false;
};

thread_local GateStream* current_stream = nullptr;

// TLS handshake on a non-blocking socket until `deadline`.
bool Handshake(SSL* ssl, int fd, absl::Time deadline) {
  for (;;) {
    const int r = SSL_accept(ssl);
    if (r == 1) return true;
    const int e = SSL_get_error(ssl, r);
    short want;
    if (e == SSL_ERROR_WANT_READ) {
      want = POLLIN;
    } else if (e == SSL_ERROR_WANT_WRITE) {
      want = POLLOUT;
    } else {
      ERR_clear_error();
      return false;
    }
    if (WaitFd(fd, want, deadline) <= 0) return false;
  }
}

}  // namespace

// Connection threads started on demand, up to a bound; once all are busy, the accept
// loop waits in enqueue (the kernel's backlog holds the rest) instead of an unbounded
// queue here. The cap on connections *served* is active_ in process_and_close_socket;
// the overflow threads exist to answer the 503s.
class GatedHttpServer::Pool final : public httplib::TaskQueue {
 public:
  Pool(GatedHttpServer* server, int max_threads, prometheus::Gauge* busy)
      : server_(server), max_threads_(max_threads), busy_(busy) {}
  ~Pool() override {
    shutdown();
    MutexLock lock(&server_->pool_mu_);
    server_->pool_ = nullptr;
  }

  void enqueue(std::function<void()> fn) override ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    while (!stopping_ && idle_ <= jobs_.size() &&
           threads_.size() >= static_cast<size_t>(max_threads_)) {
      freed_.Wait(&mu_);
    }
    jobs_.push_back(std::move(fn));
    if (idle_ >= jobs_.size()) {
      work_.Signal();
    } else {
      threads_.emplace_back([this] { Run(); });
    }
  }

  void BeginStop() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    stopping_ = true;
    freed_.SignalAll();
    work_.SignalAll();
  }

  // Runs what is queued (the library closes those connections at once when stopped),
  // then joins every thread.
  void shutdown() override ABSL_LOCKS_EXCLUDED(mu_) {
    BeginStop();
    std::vector<std::thread> threads;
    {
      MutexLock lock(&mu_);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
  }

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_) {
    for (;;) {
      std::function<void()> job;
      {
        MutexLock lock(&mu_);
        ++idle_;
        while (jobs_.empty() && !stopping_) work_.Wait(&mu_);
        --idle_;
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      if (busy_ != nullptr) busy_->Increment();
      job();
      if (busy_ != nullptr) busy_->Decrement();
      MutexLock lock(&mu_);
      freed_.Signal();
    }
  }

  GatedHttpServer* const server_;
  const int max_threads_;
  prometheus::Gauge* const busy_;
  Mutex mu_;
  CondVar work_;   // a job was queued (or stopping)
  CondVar freed_;  // a thread became idle (or stopping)
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  size_t idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

absl::Status HttpGateOptions::Validate() const {
  if (max_connections < 1 || overflow_threads < 1) {
    return absl::InvalidArgumentError("HTTP: max_connections and overflow_threads must be >= 1");
  }
  if (max_header_bytes < 1024 || max_header_fields < 1 || max_body_wire_bytes < 1024) {
    return absl::InvalidArgumentError("HTTP: header and body limits are too small");
  }
  if (request_timeout < absl::Seconds(1) || keep_alive_timeout < absl::Seconds(1) ||
      write_timeout < absl::Seconds(1) || keep_alive_max_requests < 1) {
    return absl::InvalidArgumentError("HTTP: timeouts must be >= 1 s");
  }
  return absl::OkStatus();
}

GatedHttpServer::GatedHttpServer(HttpGateOptions options) : options_(std::move(options)) {
  new_task_queue = [this] {
    auto* pool = new Pool(this, options_.max_connections + options_.overflow_threads,
                          options_.busy);
    MutexLock lock(&pool_mu_);
    pool_ = pool;
    return pool;
  };
}

GatedHttpServer::~GatedHttpServer() { Stop(); }

void GatedHttpServer::Stop() {
  {
    MutexLock lock(&pool_mu_);
    if (pool_ != nullptr) pool_->BeginStop();
  }
  stop();
}

int GatedHttpServer::CurrentSocket() {
  return current_stream != nullptr ? current_stream->socket() : -1;
}

void GatedHttpServer::CloseAfterResponse() {
  if (current_stream != nullptr) current_stream->set_close_after();
}

void GatedHttpServer::AnswerOverCap(int sock) {
  over_cap_.fetch_add(1);
  if (options_.tls != nullptr) return;  // a plaintext 503 means nothing to a TLS client
  GateStream stream(sock, nullptr, options_);
  stream.Refuse(503, "too many connections: try again later");
  stream.Linger(kOverCapLingerTime);
}

bool GatedHttpServer::process_and_close_socket(socket_t sock) {
  const int flags = fcntl(sock, F_GETFL, 0);
  if (flags >= 0) fcntl(sock, F_SETFL, flags | O_NONBLOCK);
  struct Leave {
    std::atomic<int>& active;
    int sock;
    ~Leave() {
      ::shutdown(sock, SHUT_RDWR);
      ::close(sock);
      active.fetch_sub(1);
    }
  } leave{active_, sock};
  if (active_.fetch_add(1) >= options_.max_connections) {
    AnswerOverCap(sock);
    return false;
  }
  SSL* ssl = nullptr;
  if (options_.tls != nullptr) {
    ssl = SSL_new(options_.tls);
    if (ssl == nullptr || SSL_set_fd(ssl, sock) != 1 ||
        !Handshake(ssl, sock, absl::Now() + options_.request_timeout)) {
      if (ssl != nullptr) SSL_free(ssl);
      return false;
    }
  }
  GateStream stream(sock, ssl, options_);
  current_stream = &stream;
  const auto stopping = [this] { return svr_sock_ == INVALID_SOCKET; };
  bool ok = false;
  for (size_t left = options_.keep_alive_max_requests; left > 0 && !stopping(); --left) {
    if (!stream.WaitForRequest(stopping)) break;
    stream.BeginRequest();
    const bool close =
        left == 1 || (options_.close_connections && options_.close_connections());
    bool closed = false;
    ok = process_request(stream, close, closed, [ssl](httplib::Request& req) {
      if (ssl != nullptr) req.ssl = ssl;
    });
    if (!ok || closed || close || stream.refused() || stream.close_after()) break;
  }
  // Past the body now: an answer still being written is bounded by write_timeout.
  stream.SetDeadline(absl::InfiniteFuture());
  if (stream.refused() || stream.close_after()) stream.Linger();
  current_stream = nullptr;
  if (ssl != nullptr) {
    if (ok) SSL_shutdown(ssl);
    SSL_free(ssl);
  }
  return ok;
}

}  // namespace weft

#include "common/http_gate.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/mutex.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

class Raw {
 public:
  explicit Raw(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    timeval tv{20, 0};  // hang guard
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~Raw() { close(fd_); }
  bool ok() const { return ok_; }
  bool Send(const std::string& b) {
    return send(fd_, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size());
  }
  // Everything until the server closes (or the guard).
  std::string ReadAll() {
    std::string got;
    char buf[4096];
    for (ssize_t n; (n = recv(fd_, buf, sizeof buf, 0)) > 0;) got.append(buf, n);
    return got;
  }
  std::string ReadUntil(const std::string& needle) {
    std::string got;
    char buf[1];
    while (!absl::StrContains(got, needle) && recv(fd_, buf, 1, 0) == 1) got.push_back(buf[0]);
    return got;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

class HttpGateTest : public ::testing::Test {
 protected:
  void Start(HttpGateOptions o) {
    server_ = std::make_unique<GatedHttpServer>(std::move(o));
    server_->Get("/hi", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("hi", "text/plain");
    });
    server_->Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(std::to_string(req.body.size()), "text/plain");
    });
    port_ = server_->bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    listener_ = std::thread([this] { server_->listen_after_bind(); });
    while (!server_->is_running()) std::this_thread::yield();  // the accept loop runs
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Stop();
    if (listener_.joinable()) listener_.join();
  }
  // Every connection the test ended has given its slot back. A refused one lingers on
  // its thread until it sees the client's close, after the client saw its end: without
  // this wait a third connection right after two refused ones was once answered 503.
  bool AllConnectionsEnded() {
    const absl::Time give_up = absl::Now() + absl::Seconds(30);  // a hang guard
    while (server_->active_connections() > 0) {
      if (absl::Now() > give_up) return false;
      absl::SleepFor(absl::Milliseconds(1));  // the poll's pace, not a synchronization
    }
    return true;
  }

  std::unique_ptr<GatedHttpServer> server_;
  std::thread listener_;
  int port_ = 0;
};

HttpGateOptions Small() {
  HttpGateOptions o;
  o.max_connections = 2;
  o.overflow_threads = 1;
  o.max_header_bytes = 2048;
  o.max_header_fields = 8;
  o.max_body_wire_bytes = 4096;
  o.request_timeout = absl::Seconds(1);  // ATrickledHeadIs408AtTheDeadline waits for it
  // Idle connections that hold a slot (AConnectionOverTheCapIs503AtOnce) stay open for
  // longer than any pause of the test's thread.
  o.keep_alive_timeout = absl::Seconds(60);
  return o;
}

TEST_F(HttpGateTest, ServesKeepAliveAndPipelinedRequests) {
  Start(Small());
  Raw c(port_);
  ASSERT_TRUE(c.Send("GET /hi HTTP/1.1\r\nHost: t\r\n\r\nGET /hi HTTP/1.1\r\nHost: t\r\n\r\n"));
  std::string got = c.ReadUntil("hi");
  got += c.ReadUntil("hi");
  EXPECT_EQ(got.find("HTTP/1.1 200"), 0u) << got;
  EXPECT_NE(got.find("HTTP/1.1 200", 1), std::string::npos) << got;
}

TEST_F(HttpGateTest, HeadOverTheByteOrFieldCapIs431) {
  Start(Small());
  {
    Raw c(port_);
    ASSERT_TRUE(c.Send(absl::StrCat("GET /hi HTTP/1.1\r\nX-A: ", std::string(3000, 'a'), "\r\n\r\n")));
    EXPECT_TRUE(absl::StartsWith(c.ReadAll(), "HTTP/1.1 431")) << "bytes";
  }
  {
    Raw c(port_);
    std::string h = "GET /hi HTTP/1.1\r\n";
    for (int i = 0; i < 9; ++i) absl::StrAppend(&h, "X-", i, ": 1\r\n");
    ASSERT_TRUE(c.Send(h + "\r\n"));
    EXPECT_TRUE(absl::StartsWith(c.ReadAll(), "HTTP/1.1 431")) << "fields";
  }
  ASSERT_TRUE(AllConnectionsEnded());
  Raw ok(port_);  // 8 fields are fine, and the server still serves
  std::string h = "GET /hi HTTP/1.1\r\n";
  for (int i = 0; i < 7; ++i) absl::StrAppend(&h, "X-", i, ": 1\r\n");
  ASSERT_TRUE(ok.Send(h + "Connection: close\r\n\r\n"));
  EXPECT_TRUE(absl::StartsWith(ok.ReadAll(), "HTTP/1.1 200"));
}

TEST_F(HttpGateTest, ATrickledHeadIs408AtTheDeadline) {
  Start(Small());
  Raw c(port_);
  ASSERT_TRUE(c.Send("GET /hi HTTP/1.1\r\n"));  // and nothing more
  EXPECT_TRUE(absl::StartsWith(c.ReadAll(), "HTTP/1.1 408"));
}

TEST_F(HttpGateTest, ChunkedBodyOverTheWireCapIs413AndEncodedBodiesAre415) {
  Start(Small());
  {
    Raw c(port_);
    std::string req = "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 10; ++i) absl::StrAppend(&req, "400\r\n", std::string(1024, 'x'), "\r\n");
    c.Send(req + "0\r\n\r\n");
    EXPECT_TRUE(absl::StartsWith(c.ReadAll(), "HTTP/1.1 413"));
  }
  {
    Raw c(port_);
    c.Send("POST /echo HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\nabcd");
    EXPECT_TRUE(absl::StartsWith(c.ReadAll(), "HTTP/1.1 415"));
  }
  ASSERT_TRUE(AllConnectionsEnded());
  Raw c(port_);  // within the cap: read whole
  c.Send("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
         "3\r\nabc\r\n0\r\n\r\n");
  const std::string got = c.ReadAll();
  EXPECT_TRUE(absl::StartsWith(got, "HTTP/1.1 200")) << got;
  EXPECT_TRUE(absl::EndsWith(got, "\r\n\r\n3")) << got;
}

TEST_F(HttpGateTest, AConnectionOverTheCapIs503AtOnce) {
  Start(Small());
  Raw a(port_), b(port_);  // idle: each holds one of the 2 slots
  ASSERT_TRUE(a.Send("GET /hi HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(b.Send("GET /hi HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(a.ReadUntil("hi").find("HTTP/1.1 200"), 0u);
  EXPECT_EQ(b.ReadUntil("hi").find("HTTP/1.1 200"), 0u);
  Raw c(port_);
  c.Send("GET /hi HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(c.ReadAll(), "HTTP/1.1 503"));
  EXPECT_EQ(server_->over_cap(), 1);
}

TEST_F(HttpGateTest, EachRefusalIsReportedWithItsStatus) {
  HttpGateOptions o = Small();
  Mutex mu;
  std::vector<int> refused;
  o.on_refused = [&](int status) {
    MutexLock l(&mu);
    refused.push_back(status);
  };
  Start(std::move(o));
  {
    Raw c(port_);
    ASSERT_TRUE(c.Send(absl::StrCat("GET /hi HTTP/1.1\r\nX-A: ", std::string(3000, 'a'), "\r\n\r\n")));
    EXPECT_TRUE(absl::StartsWith(c.ReadAll(), "HTTP/1.1 431"));
  }
  {
    Raw c(port_);
    c.Send("POST /echo HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\nabcd");
    EXPECT_TRUE(absl::StartsWith(c.ReadAll(), "HTTP/1.1 415"));
  }
  ASSERT_TRUE(AllConnectionsEnded());
  Raw ok(port_);  // an answer of a handler is not a refusal
  ok.Send("GET /hi HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(ok.ReadAll(), "HTTP/1.1 200"));
  MutexLock l(&mu);
  EXPECT_EQ(refused, (std::vector<int>{431, 415}));
}

TEST_F(HttpGateTest, WhileClosingEveryAnswerSaysConnectionClose) {
  std::atomic<bool> closing{false};
  HttpGateOptions o = Small();
  o.close_connections = [&] { return closing.load(); };
  Start(o);
  {
    Raw c(port_);
    c.Send("GET /hi HTTP/1.1\r\n\r\n");
    EXPECT_FALSE(absl::StrContains(c.ReadUntil("hi"), "Connection: close"));
  }
  closing = true;
  Raw c(port_);
  c.Send("GET /hi HTTP/1.1\r\n\r\n");
  const std::string got = c.ReadAll();  // closed by the server after the answer
  EXPECT_TRUE(absl::StrContains(got, "Connection: close")) << got;
}

}  // namespace
}  // namespace weft

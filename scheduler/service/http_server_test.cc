// Loopback tests of the OpenAI HTTP API with a fake engine (the test plays the planning
// thread through each submission's outbox): field mapping into the one validator,
// non-streamed and streamed answers, errors and their statuses, the shared stream
// limit, client disconnects reaching the engine as cancels, the slow-reader guard,
// authentication before any work, and HTTPS with and without client certificates.
#include "scheduler/service/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "scheduler/service/testing/fake_engine.h"

namespace weft {
namespace {

using Json = nlohmann::json;
using testing::ByteEncoder;
using testing::FakeEngine;

class CharText : public TokenTextSource {
 public:
  absl::string_view TokenBytes(int32_t id) const override {
    return absl::string_view(&chars_[static_cast<unsigned char>(id)], 1);
  }

 private:
  std::string chars_ = [] {
    std::string s(256, '?');
    for (int i = 0; i < 256; ++i) s[i] = static_cast<char>(i);
    return s;
  }();
};

weft::v1::GenerateResponse Resp(
    int index, const std::string& text,
    weft::v1::FinishReason finish = weft::v1::FINISH_REASON_UNSPECIFIED) {
  weft::v1::GenerateResponse r;
  r.set_index(index);
  r.set_text(text);
  for (unsigned char c : text) r.add_token_ids(c);
  r.set_finish_reason(finish);
  return r;
}

// The "data" payloads of an SSE body.
std::vector<std::string> Events(const std::string& body) {
  std::vector<std::string> out;
  for (absl::string_view block : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    EXPECT_TRUE(absl::ConsumePrefix(&block, "data: ")) << block;
    out.emplace_back(block);
  }
  return out;
}

// A raw client for what httplib::Client cannot do: leave in the middle, or never read.
class RawClient {
 public:
  // `rcvbuf` > 0 fixes the receive buffer (no autotuning): a client that does not read
  // then stops the server's writes for good once the buffers are full.
  explicit RawClient(int port, int rcvbuf = 0) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawClient() { Close(); }
  bool ok() const { return ok_; }
  bool Post(const std::string& path, const std::string& body) {
    const std::string req =
        absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n",
                     "Content-Length: ", body.size(), "\r\n\r\n", body);
    return send(fd_, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
  }
  // Reads until `needle` has arrived (or the peer closed); the bytes read so far.
  std::string ReadUntil(const std::string& needle) {
    char buf[4096];
    while (!absl::StrContains(got_, needle)) {
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      got_.append(buf, n);
    }
    return got_;
  }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
  std::string got_;
};

class HttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpServerOptions o = {}, FrontendOptions fo = {}) {
    ValidationLimits lim;
    lim.model_name = "fake";
    lim.vocab_size = 256;
    lim.context_length = 128;
    if (fo.max_streams == FrontendOptions().max_streams) fo.max_streams = 2;
    frontend_ = std::make_unique<GenerateFrontend>(fo, lim, &encoder_, &engine_, &metrics_);
    o.host = "127.0.0.1";
    o.port = 0;
    o.keep_alive_timeout = absl::Seconds(1);
    auto s = OpenAiHttpServer::Start(o, frontend_.get(), &text_, &metrics_);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    server_->SetServing(true);
  }
  void TearDown() override {
    // Whatever a test left open ends as the engine would end it.
    {
      MutexLock l(&engine_.mu_);
      for (Submission& s : engine_.subs_)
        s.outbox->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "test over"));
    }
    if (server_ != nullptr) server_->Stop();
  }
  httplib::Client Client() {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(30, 0);
    return c;
  }
  // Waits for submission `i` and returns a copy of it (the outbox is shared).
  Submission Sub(size_t i) {
    EXPECT_TRUE(engine_.WaitFor([&] { return engine_.subs_.size() > i; })) << "no submission " << i;
    MutexLock l(&engine_.mu_);
    if (engine_.subs_.size() <= i) return Submission();
    const Submission& s = engine_.subs_[i];
    Submission c;
    c.key = s.key;
    c.request = s.request;
    c.outbox = s.outbox;
    return c;
  }
  bool Cancelled(int64_t key) {
    return engine_.WaitFor([&] {
      return std::find(engine_.cancelled_.begin(), engine_.cancelled_.end(), key) !=
             engine_.cancelled_.end();
    });
  }
  bool NoOpenStreams() {
    return engine_.WaitFor([&] { return frontend_->open_streams() == 0; });
  }
  double StatusCount(const std::string& code) { return metrics_.ByStatus(code).Value(); }

  ByteEncoder encoder_;
  FakeEngine engine_;
  CharText text_;
  ServiceMetrics metrics_;
  std::unique_ptr<GenerateFrontend> frontend_;
  std::unique_ptr<OpenAiHttpServer> server_;
};

TEST_F(HttpServerTest, HealthFollowsServing) {
  Start();
  server_->SetServing(false);
  auto r = Client().Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  server_->SetServing(true);
  r = Client().Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(HttpServerTest, CompletionReachesTheValidatorAndAnswersInOpenAiShape) {
  Start();
  auto reply = std::async(std::launch::async, [&] {
    return Client().Post("/v1/completions",
                         R"({"model": "fake", "prompt": "hi", "max_tokens": 5, "temperature": 0.5,
                             "stop": "zz", "seed": 11, "top_k": 3})",
                         "application/json");
  });
  Submission s = Sub(0);
  EXPECT_EQ(s.request.prompt_token_ids, (std::vector<int32_t>{'h', 'i'}));
  EXPECT_EQ(s.request.max_tokens, 5);
  EXPECT_FLOAT_EQ(s.request.sampling.temperature, 0.5f);
  EXPECT_EQ(s.request.sampling.top_k, 3);
  EXPECT_EQ(s.request.sampling.seed, 11u);
  EXPECT_EQ(s.request.stop_strings, (std::vector<std::string>{"zz"}));
  auto first = Resp(0, "Hel");
  first.set_request_id("7");
  ASSERT_TRUE(s.outbox->Push(first));
  auto last = Resp(0, "lo", weft::v1::FINISH_REASON_LENGTH);
  last.mutable_usage()->set_prompt_tokens(2);
  last.mutable_usage()->set_completion_tokens(5);
  ASSERT_TRUE(s.outbox->Push(last));
  s.outbox->Finish(grpc::Status::OK);
  auto r = reply.get();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
  Json j = Json::parse(r->body);
  EXPECT_EQ(j["id"], "cmpl-7");
  EXPECT_EQ(j["model"], "fake");
  EXPECT_EQ(j["choices"][0]["text"], "Hello");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["total_tokens"], 7);
  EXPECT_TRUE(NoOpenStreams());
}

TEST_F(HttpServerTest, ChatStreamInterleavesChoicesThenUsageThenDone) {
  encoder_.chat = true;
  Start();
  auto reply = std::async(std::launch::async, [&] {
    return Client().Post(
        "/v1/chat/completions",
        R"({"messages": [{"role": "user", "content": "hi"}], "n": 2, "stream": true,
                             "stream_options": {"include_usage": true}})",
        "application/json");
  });
  Submission s = Sub(0);
  EXPECT_EQ(s.request.n, 2);
  auto r0 = Resp(0, "a");
  r0.set_request_id("3");
  ASSERT_TRUE(s.outbox->Push(r0));
  ASSERT_TRUE(s.outbox->Push(Resp(1, "b")));
  ASSERT_TRUE(s.outbox->Push(Resp(0, "c", weft::v1::FINISH_REASON_STOP)));
  auto end = Resp(1, "", weft::v1::FINISH_REASON_LENGTH);
  end.mutable_usage()->set_prompt_tokens(2);
  end.mutable_usage()->set_completion_tokens(3);
  ASSERT_TRUE(s.outbox->Push(end));
  s.outbox->Finish(grpc::Status::OK);
  auto r = reply.get();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  std::vector<std::string> ev = Events(r->body);
  ASSERT_EQ(ev.size(), 6u) << r->body;
  const int want_index[] = {0, 1, 0, 1};
  const char* want_content[] = {"a", "b", "c", nullptr};
  for (int i = 0; i < 4; ++i) {
    Json c = Json::parse(ev[i]);
    EXPECT_EQ(c["id"], "chatcmpl-3");
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["choices"][0]["index"], want_index[i]) << ev[i];
    if (want_content[i] != nullptr) {
      EXPECT_EQ(c["choices"][0]["delta"]["content"], want_content[i]);
    }
    EXPECT_TRUE(c["usage"].is_null());
  }
  EXPECT_EQ(Json::parse(ev[1])["choices"][0]["delta"]["role"], "assistant");  // b's first chunk
  EXPECT_EQ(Json::parse(ev[2])["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(Json::parse(ev[3])["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(Json::parse(ev[4])["usage"]["completion_tokens"], 3);
  EXPECT_EQ(ev[5], "[DONE]");
}

TEST_F(HttpServerTest, ErrorsHaveOpenAisShapeAndStatus) {
  Start();
  auto post = [&](const std::string& path, const std::string& body) {
    auto r = Client().Post(path.c_str(), body, "application/json");
    EXPECT_TRUE(r);
    return r ? std::make_pair(r->status, Json::parse(r->body)) : std::make_pair(0, Json());
  };
  auto [bad_json, bj] = post("/v1/completions", "{");
  EXPECT_EQ(bad_json, 400);
  EXPECT_EQ(bj["error"]["type"], "invalid_request_error");
  auto [temp, tj] = post("/v1/completions", R"({"prompt": "x", "temperature": -1})");
  EXPECT_EQ(temp, 400);
  EXPECT_EQ(tj["error"]["param"], "temperature");
  auto [model, mj] = post("/v1/completions", R"({"prompt": "x", "model": "other"})");
  EXPECT_EQ(model, 404);
  EXPECT_EQ(mj["error"]["code"], "model_not_found");
  auto [chat, cj] =
      post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}]})");
  EXPECT_EQ(chat, 400);  // the encoder has no chat template: UNIMPLEMENTED
  EXPECT_EQ(cj["error"]["code"], "unimplemented");
  auto [path, pj] = post("/v1/embeddings", "{}");
  EXPECT_EQ(path, 404);
  EXPECT_EQ(pj["error"]["message"], "Invalid URL (POST /v1/embeddings)");
  {
    MutexLock l(&engine_.mu_);
    EXPECT_TRUE(engine_.subs_.empty());  // none of those reached the engine
    engine_.reject_ = true;
  }
  auto [full, fj] = post("/v1/completions", R"({"prompt": "x"})");
  EXPECT_EQ(full, 429);
  EXPECT_EQ(fj["error"]["type"], "rate_limit_error");
  // Counted as gRPC rejections are.
  EXPECT_EQ(StatusCount("INVALID_ARGUMENT"), 2);
  EXPECT_EQ(StatusCount("NOT_FOUND"), 1);
  EXPECT_EQ(StatusCount("UNIMPLEMENTED"), 1);
  EXPECT_EQ(StatusCount("RESOURCE_EXHAUSTED"), 1);

  auto models = Client().Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(Json::parse(models->body)["data"][0]["id"], "fake");
  auto one = Client().Get("/v1/models/fake");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200);
  auto none = Client().Get("/v1/models/nope");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 404);
}

TEST_F(HttpServerTest, StreamLimitIsSharedAndAnswers429) {
  Start();  // max_streams = 2
  RawClient a(server_->port()), b(server_->port());
  ASSERT_TRUE(a.Post("/v1/completions", R"({"prompt": "x"})"));
  ASSERT_TRUE(b.Post("/v1/completions", R"({"prompt": "y"})"));
  Submission sa = Sub(0), sb = Sub(1);
  auto r = Client().Post("/v1/completions", R"({"prompt": "z"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_NE(
      Json::parse(r->body)["error"]["message"].get<std::string>().find("too many open streams"),
      std::string::npos);
  sa.outbox->Finish(grpc::Status::OK);
  sb.outbox->Finish(grpc::Status::OK);
  EXPECT_TRUE(NoOpenStreams());
}

TEST_F(HttpServerTest, EngineErrorBeforeTheFirstTokenIsTheHttpStatus) {
  Start();
  auto reply = std::async(std::launch::async, [&] {
    return Client().Post("/v1/completions", R"({"prompt": "x", "stream": true})",
                         "application/json");
  });
  Sub(0).outbox->Finish(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "no live replica could finish the request"));
  auto r = reply.get();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(Json::parse(r->body)["error"]["type"], "server_error");
}

TEST_F(HttpServerTest, EngineErrorAfterTheFirstTokenIsAnEventBeforeDone) {
  Start();
  RawClient c(server_->port());
  ASSERT_TRUE(c.Post("/v1/completions", R"({"prompt": "x", "stream": true})"));
  Submission s = Sub(0);
  ASSERT_TRUE(s.outbox->Push(Resp(0, "partial")));
  // Once the first chunk is out, the status (200) is sent.
  EXPECT_TRUE(absl::StrContains(c.ReadUntil("partial"), "partial"));
  s.outbox->Finish(
      grpc::Status(grpc::StatusCode::INTERNAL, "a worker failed while running the request"));
  const std::string got = c.ReadUntil("data: [DONE]");
  EXPECT_TRUE(absl::StartsWith(got, "HTTP/1.1 200")) << got;
  const size_t error =
      got.find(R"(data: {"error":{"message":"a worker failed while running the request")");
  ASSERT_NE(error, std::string::npos) << got;
  EXPECT_NE(got.find(R"("code":"internal")", error), std::string::npos) << got;
  EXPECT_NE(got.find("data: [DONE]", error), std::string::npos) << got;
}

TEST_F(HttpServerTest, ClientThatLeavesWhileWaitingIsCancelled) {
  Start();
  RawClient c(server_->port());
  ASSERT_TRUE(c.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 50})"));
  Submission s = Sub(0);
  c.Close();  // before any token: the handler is waiting, not writing
  EXPECT_TRUE(Cancelled(s.key));
  EXPECT_TRUE(NoOpenStreams());
  EXPECT_TRUE(s.outbox->Done());
}

TEST_F(HttpServerTest, StreamingClientThatLeavesIsCancelled) {
  Start();
  RawClient c(server_->port());
  ASSERT_TRUE(c.Post("/v1/completions", R"({"prompt": "x", "stream": true})"));
  Submission s = Sub(0);
  ASSERT_TRUE(s.outbox->Push(Resp(0, "first")));
  EXPECT_TRUE(absl::StrContains(c.ReadUntil("first"), "first"));
  c.Close();
  EXPECT_TRUE(Cancelled(s.key));
  EXPECT_TRUE(NoOpenStreams());
}

TEST_F(HttpServerTest, AbortEndsAStreamWhoseClientNeverReads) {
  HttpServerOptions o;
  o.write_timeout = absl::Seconds(120);  // longer than the wait below: Abort must end it
  FrontendOptions fo;
  fo.stream_buffer_bytes = 1 << 20;
  Start(o, fo);
  RawClient c(server_->port(), /*rcvbuf=*/4096);
  ASSERT_TRUE(c.Post("/v1/completions", R"({"prompt": "x", "stream": true})"));
  Submission s = Sub(0);
  // One response at a time until a write stays in flight: the socket buffers are full.
  const std::string chunk(64 << 10, 'a');
  bool stuck = false;
  for (int pushed = 0; pushed < 2000 && !stuck; ++pushed) {
    ASSERT_TRUE(s.outbox->Push(Resp(0, chunk)));
    ASSERT_TRUE(engine_.WaitFor([&] {
      stuck = s.outbox->Stalled(absl::Now(), absl::Milliseconds(200));
      return stuck || s.outbox->queued_bytes() == 0;
    }));
  }
  ASSERT_TRUE(stuck) << "writes never stalled";
  EXPECT_EQ(frontend_->open_streams(), 1);
  s.outbox->Abort(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "stream buffer full"));
  EXPECT_TRUE(NoOpenStreams()) << "the stuck write was not cut short";
  EXPECT_TRUE(s.outbox->Done());
  // The stream was cut, not completed: the client reads what was sent, then the end.
  const std::string got = c.ReadUntil("data: [DONE]");
  EXPECT_FALSE(absl::StrContains(got, "data: [DONE]"));
  EXPECT_TRUE(absl::StartsWith(got, "HTTP/1.1 200")) << got.substr(0, 100);
}

TEST_F(HttpServerTest, AuthenticationRunsBeforeAnyWork) {
  HttpServerOptions o;
  o.authorize = [](absl::string_view authorization) {
    return authorization == "Bearer good"
               ? absl::OkStatus()
               : absl::UnauthenticatedError("missing or unknown bearer token");
  };
  Start(o);
  auto r =
      Client().Post("/v1/completions", R"({"prompt": "x", "temperature": -1})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);  // not 400: nothing was parsed
  EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer");
  EXPECT_EQ(Json::parse(r->body)["error"]["code"], "invalid_api_key");
  auto models = Client().Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  auto health = Client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);  // probes carry no token
  {
    MutexLock l(&engine_.mu_);
    EXPECT_TRUE(engine_.subs_.empty());
  }
  httplib::Client authed = Client();
  authed.set_bearer_token_auth("good");
  auto ok = authed.Get("/v1/models");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(StatusCount("UNAUTHENTICATED"), 1);
}

// HTTPS with certificates made by openssl at test time.
class HttpsTest : public HttpServerTest {
 protected:
  void SetUp() override {
    if (std::system("openssl version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no openssl command";
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/https_test_", getpid());
    const std::string d = dir_;
    const std::string script = absl::StrCat(
        "set -e; mkdir -p ", d, "; cd ", d, "; ",
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=test-ca -keyout ca.key -out "
        "ca.pem; ",
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext; ",
        "openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout server.key -out "
        "server.csr; ",
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
        "-extfile san.ext -out server.pem; ",
        "openssl req -newkey rsa:2048 -nodes -subj /CN=client -keyout client.key -out client.csr; ",
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out "
        "client.pem",
        " >/dev/null 2>&1");
    ASSERT_EQ(std::system(("bash -c \"" + script + "\" >/dev/null 2>&1").c_str()), 0)
        << "openssl failed";
  }
  std::string Path(const std::string& f) const { return absl::StrCat(dir_, "/", f); }
  std::unique_ptr<httplib::SSLClient> Tls(bool with_client_cert) {
    auto c = with_client_cert
                 ? std::make_unique<httplib::SSLClient>("127.0.0.1", server_->port(),
                                                        Path("client.pem"), Path("client.key"))
                 : std::make_unique<httplib::SSLClient>("127.0.0.1", server_->port());
    c->set_ca_cert_path(Path("ca.pem").c_str());
    c->enable_server_certificate_verification(true);
    return c;
  }
  std::string dir_;
};

TEST_F(HttpsTest, ServesOverTlsAndRefusesPlaintext) {
  HttpServerOptions o;
  o.tls_cert_file = Path("server.pem");
  o.tls_key_file = Path("server.key");
  Start(o);
  auto r = Tls(false)->Get("/v1/models");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_FALSE(Client().Get("/v1/models"));  // plaintext to a TLS port
}

TEST_F(HttpsTest, ClientCertificatesFromTheCaAreRequired) {
  HttpServerOptions o;
  o.tls_cert_file = Path("server.pem");
  o.tls_key_file = Path("server.key");
  o.tls_client_ca_file = Path("ca.pem");
  Start(o);
  EXPECT_FALSE(Tls(false)->Get("/v1/models"));
  auto r = Tls(true)->Get("/v1/models");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
}

TEST(HttpServerOptionsTest, Validate) {
  HttpServerOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.tls_cert_file = "a.pem";
  EXPECT_FALSE(o.Validate().ok());  // no key
  o.tls_key_file = "a.key";
  EXPECT_TRUE(o.Validate().ok());
  o.port = 70000;
  EXPECT_FALSE(o.Validate().ok());
}

}  // namespace
}  // namespace weft

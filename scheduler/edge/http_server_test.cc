// Loopback tests of the OpenAI HTTP API with a fake engine (the test plays the planning
// thread through each submission's outbox): field mapping into the one validator,
// non-streamed and streamed answers, errors and their statuses, the shared stream
// limit, client disconnects reaching the engine as cancels, the slow-reader guard,
// bearer tokens before any work, the x-weft-model header, and HTTPS (client
// certificates, other CAs, a certificate renewed without a restart).
#include "scheduler/edge/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/testing/test_certs.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "scheduler/edge/testing/byte_encoder.h"
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
    return Send(absl::StrCat("POST ", path,
                             " HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n",
                             "Content-Length: ", body.size(), "\r\n\r\n", body));
  }
  bool Send(const std::string& bytes) {
    return send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
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
    RequestLimits lim;
    lim.vocab_size = 256;
    lim.max_model_len = 128;
    if (fo.max_streams == FrontendOptions().max_streams) fo.max_streams = 2;
    fo.model_name = "fake";
    frontend_ = std::make_unique<GenerateFrontend>(fo, lim, &encoder_, &engine_, &metrics_);
    o.host = "127.0.0.1";
    o.port = 0;
    // Far longer than a test's pause between two requests on one connection (the gate
    // polls for Stop in slices, so a long idle wait does not slow the teardown).
    o.keep_alive_timeout = absl::Seconds(60);
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
        s.outbox->Finish(absl::UnavailableError("test over"));
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
  EXPECT_EQ(s.request->spec().prompt_token_ids, (std::vector<int32_t>{'h', 'i'}));
  EXPECT_EQ(s.request->spec().stopping.max_tokens, 5);
  EXPECT_FLOAT_EQ(s.request->spec().sampling.temperature, 0.5f);
  EXPECT_EQ(s.request->spec().sampling.top_k, 3);
  EXPECT_EQ(s.request->spec().sampling.seed, 11u);
  EXPECT_EQ(s.request->spec().stopping.stop_strings, (std::vector<std::string>{"zz"}));
  auto first = Resp(0, "Hel");
  first.set_request_id("7");
  ASSERT_TRUE(s.outbox->Push(first));
  auto last = Resp(0, "lo", weft::v1::FINISH_REASON_LENGTH);
  last.mutable_usage()->set_prompt_tokens(2);
  last.mutable_usage()->set_completion_tokens(5);
  ASSERT_TRUE(s.outbox->Push(last));
  s.outbox->Finish(absl::OkStatus());
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
  EXPECT_EQ(s.request->spec().n, 2);
  auto r0 = Resp(0, "a");
  r0.set_request_id("3");
  ASSERT_TRUE(s.outbox->Push(r0));
  ASSERT_TRUE(s.outbox->Push(Resp(1, "b")));
  ASSERT_TRUE(s.outbox->Push(Resp(0, "c", weft::v1::FINISH_REASON_STOP)));
  auto end = Resp(1, "", weft::v1::FINISH_REASON_LENGTH);
  end.mutable_usage()->set_prompt_tokens(2);
  end.mutable_usage()->set_completion_tokens(3);
  ASSERT_TRUE(s.outbox->Push(end));
  s.outbox->Finish(absl::OkStatus());
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

// Tools on a model whose template writes Llama 3.x calls: the grammar is that format's
// and the answer is read in it (the frontend's tool_call_format, for both).
TEST_F(HttpServerTest, ToolCallsUseTheModelsFormat) {
  encoder_.chat = true;
  encoder_.format = ToolCallFormat::kLlama3;
  Start();
  auto reply = std::async(std::launch::async, [&] {
    return Client().Post(
        "/v1/chat/completions",
        R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required",
            "tools": [{"type": "function", "function": {"name": "get_weather"}}]})",
        "application/json");
  });
  Submission s = Sub(0);
  ASSERT_TRUE(s.request->spec().constraint.has_value());
  const Json tag = Json::parse(s.request->spec().constraint->source);
  EXPECT_EQ(tag["format"]["tags"][0]["begin"], "{\"name\": \"get_weather\", \"parameters\": ");
  auto r0 = Resp(0, "{\"name\": \"get_weather\", \"param");
  r0.set_request_id("5");
  ASSERT_TRUE(s.outbox->Push(r0));
  ASSERT_TRUE(s.outbox->Push(Resp(0, "eters\": {\"city\": \"Oslo\"}}", weft::v1::FINISH_REASON_STOP)));
  s.outbox->Finish(absl::OkStatus());
  auto r = reply.get();
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json c = Json::parse(r->body)["choices"][0];
  EXPECT_EQ(c["finish_reason"], "tool_calls");
  EXPECT_TRUE(c["message"]["content"].is_null());
  ASSERT_EQ(c["message"]["tool_calls"].size(), 1u) << r->body;
  EXPECT_EQ(c["message"]["tool_calls"][0]["id"], "call_5_0_0");
  EXPECT_EQ(c["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(c["message"]["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Oslo\"}");
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

TEST_F(HttpServerTest, OversizedBodyIs413InOpenAisShape) {
  HttpServerOptions o;
  o.max_body_bytes = 1024;
  Start(o);
  const std::string body = absl::StrCat(R"({"prompt": ")", std::string(4000, 'x'), R"("})");
  auto r = Client().Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(Json::parse(r->body)["error"]["type"], "invalid_request_error");
  MutexLock l(&engine_.mu_);
  EXPECT_TRUE(engine_.subs_.empty());
}

// A chunked body has no length to compare: the cap counts the bytes after de-chunking
// (here well under the gate's wire cap), stops reading there, and closes the connection
// (the rest of the body is unread) after the 413.
TEST_F(HttpServerTest, ChunkedBodyOverTheCapIs413AfterDechunking) {
  HttpServerOptions o;
  o.max_body_bytes = 1024;
  Start(o);
  RawClient c(server_->port());
  std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 30; ++i) absl::StrAppend(&req, "64\r\n", std::string(100, 'x'), "\r\n");
  ASSERT_TRUE(c.Send(req + "0\r\n\r\n"));
  const std::string got = c.ReadUntil("}}");
  EXPECT_TRUE(absl::StartsWith(got, "HTTP/1.1 413")) << got;
  EXPECT_TRUE(absl::StrContains(got, "Connection: close")) << got;
  EXPECT_TRUE(absl::StrContains(got, "over 1024 bytes")) << got;
  // A body within the cap is parsed as before.
  auto r = Client().Post("/v1/completions", R"({"prompt": 1})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);  // parsed (a bad prompt), not refused for its size
  MutexLock l(&engine_.mu_);
  EXPECT_TRUE(engine_.subs_.empty());
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
  sa.outbox->Finish(absl::OkStatus());
  sb.outbox->Finish(absl::OkStatus());
  EXPECT_TRUE(NoOpenStreams());
}

TEST_F(HttpServerTest, EngineErrorBeforeTheFirstTokenIsTheHttpStatus) {
  Start();
  auto reply = std::async(std::launch::async, [&] {
    return Client().Post("/v1/completions", R"({"prompt": "x", "stream": true})",
                         "application/json");
  });
  Sub(0).outbox->Finish(absl::UnavailableError("no live replica could finish the request"));
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
  s.outbox->Finish(absl::InternalError("a worker failed while running the request"));
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
  s.outbox->Abort(absl::ResourceExhaustedError("stream buffer full"));
  EXPECT_TRUE(NoOpenStreams()) << "the stuck write was not cut short";
  EXPECT_TRUE(s.outbox->Done());
  // The stream was cut, not completed: the client reads what was sent, then the end.
  const std::string got = c.ReadUntil("data: [DONE]");
  EXPECT_FALSE(absl::StrContains(got, "data: [DONE]"));
  EXPECT_TRUE(absl::StartsWith(got, "HTTP/1.1 200")) << got.substr(0, 100);
}

// The tokens of a file, as --auth_tokens_file loads them.
std::unique_ptr<BearerTokens> TokensFile(const std::string& name, const std::string& text) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name, "_", getpid());
  std::ofstream(path) << text;
  BearerTokens::Options o;
  o.path = path;
  auto t = BearerTokens::Load(o);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST_F(HttpServerTest, AuthenticationRunsBeforeAnyWork) {
  std::unique_ptr<BearerTokens> tokens = TokensFile("http_tokens", "# test\ngood\n");
  ASSERT_NE(tokens, nullptr);
  FrontendOptions fo;
  fo.auth = tokens.get();
  Start({}, fo);
  auto r =
      Client().Post("/v1/completions", R"({"prompt": "x", "temperature": -1})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);  // not 400: nothing was parsed
  EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer");
  Json err = Json::parse(r->body)["error"];
  EXPECT_EQ(err["code"], "invalid_api_key");
  EXPECT_EQ(err["type"], "invalid_request_error");
  httplib::Client wrong = Client();
  wrong.set_bearer_token_auth("bad");
  r = wrong.Post("/v1/chat/completions", R"({"messages": []})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer error=\"invalid_token\"");
  EXPECT_FALSE(absl::StrContains(r->body, "bad"));  // the token is never echoed
  auto models = Client().Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  auto one = Client().Get("/v1/models/fake");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 401);
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
  // Generation calls refused are counted as gRPC's are; /v1/models is not a call.
  EXPECT_EQ(StatusCount("UNAUTHENTICATED"), 2);
}

// A refused request's body is read and dropped: the keep-alive connection serves the
// next request (left unread, the body would be parsed as one).
TEST_F(HttpServerTest, RefusedBodyLeavesTheConnectionUsable) {
  std::unique_ptr<BearerTokens> tokens = TokensFile("http_tokens_ka", "good\n");
  ASSERT_NE(tokens, nullptr);
  FrontendOptions fo;
  fo.auth = tokens.get();
  Start({}, fo);
  RawClient c(server_->port());
  const std::string body = absl::StrCat(R"({"prompt": ")", std::string(20000, 'x'), R"("})");
  ASSERT_TRUE(c.Send(absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: t\r\n",
                                  "Content-Type: application/json\r\nContent-Length: ", body.size(),
                                  "\r\n\r\n", body)));
  const std::string refused = c.ReadUntil("invalid_api_key\"}}");
  EXPECT_TRUE(absl::StartsWith(refused, "HTTP/1.1 401")) << refused.substr(0, 200);
  // The next request on the same connection (cpp-httplib does not serve pipelined
  // requests, and clients do not send them: one after the other).
  ASSERT_TRUE(c.Send("GET /health HTTP/1.1\r\nHost: t\r\n\r\n"));
  const std::string got = c.ReadUntil("serving\"}");
  EXPECT_TRUE(absl::StrContains(got, "HTTP/1.1 200")) << got;
  EXPECT_TRUE(absl::StrContains(got, R"({"status":"serving"})")) << got;
  EXPECT_EQ(got.find("HTTP/1.1 4", 1), std::string::npos) << got;  // one 4xx: the 401
}

TEST_F(HttpServerTest, ModelHeaderIsCheckedWithTheBody) {
  Start();
  auto post = [&](const std::string& body, httplib::Headers headers) {
    auto r = Client().Post("/v1/completions", headers, body, "application/json");
    EXPECT_TRUE(r);
    return r ? std::make_pair(r->status, Json::parse(r->body)) : std::make_pair(0, Json());
  };
  // The header alone selects the model; agreeing with the body is fine.
  const std::vector<std::string> agreeing = {
      R"({"prompt": "x", "max_tokens": 1})",
      R"({"prompt": "x", "max_tokens": 1, "model": "fake"})"};
  for (size_t i = 0; i < agreeing.size(); ++i) {
    auto reply = std::async(std::launch::async, [&] {
      return post(agreeing[i], {{"x-weft-model", "fake"}});
    });
    Sub(i).outbox->Finish(absl::OkStatus());
    EXPECT_EQ(reply.get().first, 200) << agreeing[i];
  }
  auto [disagree, dj] = post(R"({"prompt": "x", "model": "fake"})", {{"X-Weft-Model", "other"}});
  EXPECT_EQ(disagree, 400);
  EXPECT_EQ(dj["error"]["param"], "model");
  EXPECT_TRUE(absl::StrContains(dj["error"]["message"].get<std::string>(), "x-weft-model"));
  auto [unknown, uj] = post(R"({"prompt": "x"})", {{"x-weft-model", "other"}});
  EXPECT_EQ(unknown, 404);
  EXPECT_EQ(uj["error"]["code"], "model_not_found");
  auto [twice, tj] =
      post(R"({"prompt": "x"})", {{"x-weft-model", "fake"}, {"x-weft-model", "fake"}});
  EXPECT_EQ(twice, 400);
  EXPECT_EQ(StatusCount("INVALID_ARGUMENT"), 2);
  EXPECT_EQ(StatusCount("NOT_FOUND"), 1);
  // GETs: a header naming another model is a 404 (the proxy's health check relies on
  // it); on /v1/models/{id} it disagrees with the id: 400, as for a body.
  for (const char* path : {"/v1/models", "/v1/models/fake", "/health"}) {
    auto other = Client().Get(path, {{"x-weft-model", "other"}});
    ASSERT_TRUE(other);
    const bool named = absl::StrContains(path, "fake");
    EXPECT_EQ(other->status, named ? 400 : 404) << path;
    EXPECT_EQ(Json::parse(other->body)["error"]["code"],
              named ? "invalid_argument" : "model_not_found")
        << path;
    auto own = Client().Get(path, {{"x-weft-model", "fake"}});
    ASSERT_TRUE(own);
    EXPECT_EQ(own->status, 200) << path;
  }
  {
    MutexLock l(&engine_.mu_);
    EXPECT_EQ(engine_.subs_.size(), 2u);
  }
}

// HTTPS with certificates made by openssl at test time (common/testing/make_test_certs.sh,
// the gRPC TLS tests' PKI): the HTTP port takes the public port's files.
class HttpsTest : public HttpServerTest {
 protected:
  void SetUp() override {
    if (std::system("openssl version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no openssl command";
    auto dir = testing::MakeTestCerts();
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *dir;
  }
  std::string Path(const std::string& f) const { return absl::StrCat(dir_, "/", f); }
  ServerTlsFiles Files(bool client_ca) const {
    ServerTlsFiles f;
    f.cert = Path("server.crt");
    f.key = Path("server.key");
    if (client_ca) f.client_ca = Path("ca.crt");
    return f;
  }
  // A client trusting `ca`, presenting `who`.crt when `who` is given.
  std::unique_ptr<httplib::SSLClient> Tls(const std::string& ca, const std::string& who = "") {
    auto c = who.empty()
                 ? std::make_unique<httplib::SSLClient>("127.0.0.1", server_->port())
                 : std::make_unique<httplib::SSLClient>("127.0.0.1", server_->port(),
                                                        Path(who + ".crt"), Path(who + ".key"));
    c->set_ca_cert_path(Path(ca).c_str());
    c->enable_server_certificate_verification(true);
    c->set_read_timeout(10, 0);
    return c;
  }
  std::string dir_;
};

TEST_F(HttpsTest, ServesOverTlsAndRefusesPlaintextAndOtherCas) {
  HttpServerOptions o;
  o.tls = Files(false);
  Start(o);
  auto r = Tls("ca.crt")->Get("/v1/models");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_FALSE(Client().Get("/v1/models"));              // plaintext to a TLS port
  EXPECT_FALSE(Tls("other-ca.crt")->Get("/v1/models"));  // a client trusting another CA
}

TEST_F(HttpsTest, ClientCertificatesFromTheCaAreRequired) {
  HttpServerOptions o;
  o.tls = Files(true);
  Start(o);
  EXPECT_FALSE(Tls("ca.crt")->Get("/v1/models"));           // none
  EXPECT_FALSE(Tls("ca.crt", "stray")->Get("/v1/models"));  // signed by another CA
  auto r = Tls("ca.crt", "client")->Get("/v1/models");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
}

// The files are re-read as gRPC's are: a certificate renewed in place (another CA here,
// so that the change shows) is served by new handshakes without a restart.
TEST_F(HttpsTest, RenewedCertificateIsServedWithoutARestart) {
  const std::string live = Path("live");
  ASSERT_EQ(std::system(absl::StrCat("mkdir -p ", live, " && cp ", Path("server.crt"), " ",
                                     Path("server.key"), " ", live)
                            .c_str()),
            0);
  HttpServerOptions o;
  o.tls.cert = live + "/server.crt";
  o.tls.key = live + "/server.key";
  o.tls.reload_interval = absl::Seconds(1);
  Start(o);
  auto r = Tls("ca.crt")->Get("/health");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  // Each file replaced whole (a handshake between the two renames sees a key that does
  // not match: it keeps the previous pair and tries again).
  for (const char* f : {"key", "crt"}) {
    ASSERT_EQ(std::system(absl::StrCat("cp ", Path(absl::StrCat("server2.", f)), " ", live,
                                       "/next && mv ", live, "/next ", live, "/server.", f)
                              .c_str()),
              0);
  }
  EXPECT_TRUE(engine_.WaitFor([&] {
    return static_cast<bool>(Tls("other-ca.crt")->Get("/health"));
  })) << "the renewed certificate was never served";
  EXPECT_FALSE(Tls("ca.crt")->Get("/health"));
}

TEST(HttpServerOptionsTest, Validate) {
  HttpServerOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.tls.client_ca = "ca.pem";
  EXPECT_FALSE(o.Validate().ok());  // a client CA alone
  o.tls.cert = "a.pem";
  EXPECT_FALSE(o.Validate().ok());  // no key
  o.tls.key = "a.key";
  EXPECT_TRUE(o.Validate().ok());
  o.port = 70000;
  EXPECT_FALSE(o.Validate().ok());
}

}  // namespace
}  // namespace weft

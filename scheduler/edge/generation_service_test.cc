// Loopback tests of the public gRPC service with a fake engine: Generate streaming
// through the outbox, rejections, cancellation reaching the engine, tokens and the model
// metadata.
#include "scheduler/edge/generation_service.h"

#include <cstdlib>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "common/mutex.h"
#include "common/testing/status_matchers.h"
#include "scheduler/edge/testing/byte_encoder.h"
#include "scheduler/service/testing/fake_engine.h"

namespace weft {
namespace {

using ::weft::testing::StatusIs;
using testing::ByteEncoder;
using testing::FakeEngine;

class GenerationServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(nullptr); }
  void Start(const BearerTokens* auth) {
    RequestLimits lim;
    lim.vocab_size = 256;
    lim.max_model_len = 128;
    FrontendOptions opts;
    opts.model_name = "fake";
    opts.max_streams = 2;
    opts.auth = auth;
    frontend_ = std::make_unique<GenerateFrontend>(opts, lim, &encoder_, &engine_, &metrics_);
    gen_ = std::make_unique<GenerationService>(frontend_.get());
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(gen_.get());
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    auto ch = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                  grpc::InsecureChannelCredentials());
    stub_ = weft::v1::Generation::NewStub(ch);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  }

  // Runs one Generate call that the service ends at once; its status.
  grpc::Status Rejected(const weft::v1::GenerateRequest& req,
                        std::vector<std::pair<std::string, std::string>> metadata = {}) {
    grpc::ClientContext ctx;
    for (const auto& [k, v] : metadata) ctx.AddMetadata(k, v);
    auto reader = stub_->Generate(&ctx, req);
    weft::v1::GenerateResponse r;
    EXPECT_FALSE(reader->Read(&r));
    return reader->Finish();
  }
  // Waits for the service to hand a call to the engine, then ends it OK.
  void ExpectSubmittedAndEnd(size_t n) {
    ASSERT_TRUE(engine_.WaitFor([&] { return engine_.subs_.size() == n; }));
    MutexLock l(&engine_.mu_);
    engine_.subs_.back().outbox->Finish(absl::OkStatus());
  }

  // A chat asking about the weather with one tool, get_weather, under `mode`.
  static weft::v1::GenerateRequest WeatherToolRequest(weft::v1::ToolChoice::Mode mode) {
    weft::v1::GenerateRequest req;
    auto* chat = req.mutable_chat();
    auto* m = chat->add_messages();
    m->set_role("user");
    m->set_content("weather?");
    chat->add_tools()->set_name("get_weather");
    chat->mutable_tool_choice()->set_mode(mode);
    return req;
  }

  ByteEncoder encoder_;
  FakeEngine engine_;
  ServiceMetrics metrics_;
  std::unique_ptr<GenerateFrontend> frontend_;
  std::unique_ptr<GenerationService> gen_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<weft::v1::Generation::Stub> stub_;
};

TEST_F(GenerationServiceTest, StreamsWhatTheEnginePushesInOrder) {
  weft::v1::GenerateRequest req;
  req.set_text("hi");
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, req);
  ASSERT_TRUE(engine_.WaitFor([&] { return engine_.subs_.size() == 1; }));
  std::shared_ptr<Outbox> out;
  {
    MutexLock l(&engine_.mu_);
    out = engine_.subs_[0].outbox;
    EXPECT_EQ(engine_.subs_[0].request->spec().prompt_token_ids,
              (std::vector<int32_t>{'h', 'i'}));
  }
  for (int i = 0; i < 50; ++i) {
    weft::v1::GenerateResponse r;
    r.add_token_ids(i);
    ASSERT_TRUE(out->Push(r));
  }
  out->Finish(absl::OkStatus());
  // Responses pushed while a write is in flight arrive merged (Outbox coalesces): every
  // token once, in order, in at most 50 messages.
  weft::v1::GenerateResponse r;
  int n = 0;
  int messages = 0;
  while (reader->Read(&r)) {
    ++messages;
    for (int32_t t : r.token_ids()) EXPECT_EQ(t, n++);
  }
  EXPECT_EQ(n, 50);
  EXPECT_LE(messages, 50);
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_FALSE(out->Push(r));  // after the end: a no-op
}

// A chat request with tool_choice: the grammar is the model's format's (here Mistral
// Nemo's), and the answer comes back read: text outside the calls, each call whole once
// closed, and FINISH_REASON_TOOL_CALLS.
TEST_F(GenerationServiceTest, ToolChoiceGetsParsedCalls) {
  encoder_.chat = true;
  encoder_.format = ToolCallFormat::kMistralNemo;
  const weft::v1::GenerateRequest req = WeatherToolRequest(weft::v1::ToolChoice::MODE_AUTO);
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, req);
  ASSERT_TRUE(engine_.WaitFor([&] { return engine_.subs_.size() == 1; }));
  std::shared_ptr<Outbox> out;
  {
    MutexLock l(&engine_.mu_);
    out = engine_.subs_[0].outbox;
    const auto& c = engine_.subs_[0].request->spec().constraint;
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->kind, GrammarConstraint::Kind::kStructuralTag);
    EXPECT_NE(c->source.find("[TOOL_CALLS]["), std::string::npos) << c->source;
  }
  const std::string answer =
      "Checking. [TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Oslo\"}}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]";
  for (size_t i = 0; i < answer.size(); i += 7) {
    weft::v1::GenerateResponse r;
    r.set_text(answer.substr(i, 7));
    if (i + 7 >= answer.size()) r.set_finish_reason(weft::v1::FINISH_REASON_STOP);
    ASSERT_TRUE(out->Push(r));
  }
  out->Finish(absl::OkStatus());
  std::string text;
  std::vector<weft::v1::ToolCall> calls;
  weft::v1::FinishReason finish = weft::v1::FINISH_REASON_UNSPECIFIED;
  weft::v1::GenerateResponse r;
  while (reader->Read(&r)) {
    text += r.text();
    for (const auto& c : r.tool_calls()) calls.push_back(c);
    if (r.finish_reason() != weft::v1::FINISH_REASON_UNSPECIFIED) finish = r.finish_reason();
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(text, "Checking.");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].name(), "get_weather");
  EXPECT_EQ(calls[0].arguments(), "{\"city\": \"Oslo\"}");
  EXPECT_EQ(calls[0].id().size(), 9u);  // Mistral's ids
  EXPECT_NE(calls[0].id(), calls[1].id());
  EXPECT_EQ(calls[1].arguments(), "{\"city\": \"Rome\"}");
  EXPECT_EQ(finish, weft::v1::FINISH_REASON_TOOL_CALLS);
}

// The answer is ready before the service has built the call's writer (the outbox writes
// as soon as the writer attaches): its calls are still read, none goes out as raw text.
TEST_F(GenerationServiceTest, ToolCallsAreReadFromTheFirstResponse) {
  encoder_.chat = true;
  encoder_.format = ToolCallFormat::kMistralNemo;
  {
    MutexLock l(&engine_.mu_);
    weft::v1::GenerateResponse r;
    r.set_text("[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {}}]");
    r.set_finish_reason(weft::v1::FINISH_REASON_STOP);
    engine_.answer_at_submit_.push_back(r);
  }
  const weft::v1::GenerateRequest req = WeatherToolRequest(weft::v1::ToolChoice::MODE_REQUIRED);
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, req);
  ExpectSubmittedAndEnd(1);
  std::string text;
  int calls = 0;
  weft::v1::GenerateResponse r;
  while (reader->Read(&r)) {
    text += r.text();
    calls += r.tool_calls_size();
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(text, "");
  EXPECT_EQ(calls, 1);
}

TEST_F(GenerationServiceTest, RejectionsCarryTheirStatus) {
  {
    weft::v1::GenerateRequest req;  // no prompt
    grpc::ClientContext ctx;
    auto reader = stub_->Generate(&ctx, req);
    weft::v1::GenerateResponse r;
    EXPECT_FALSE(reader->Read(&r));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    weft::v1::GenerateRequest req;
    req.set_text("x");
    req.set_model("other");
    grpc::ClientContext ctx;
    auto reader = stub_->Generate(&ctx, req);
    weft::v1::GenerateResponse r;
    EXPECT_FALSE(reader->Read(&r));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    engine_.reject_ = true;
    weft::v1::GenerateRequest req;
    req.set_text("x");
    grpc::ClientContext ctx;
    auto reader = stub_->Generate(&ctx, req);
    weft::v1::GenerateResponse r;
    EXPECT_FALSE(reader->Read(&r));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
}

TEST_F(GenerationServiceTest, TooManyStreamsIsResourceExhaustedAtOnce) {
  weft::v1::GenerateRequest req;
  req.set_text("x");
  grpc::ClientContext c1, c2, c3;
  auto r1 = stub_->Generate(&c1, req);
  auto r2 = stub_->Generate(&c2, req);
  ASSERT_TRUE(engine_.WaitFor([&] { return engine_.subs_.size() == 2; }));
  auto r3 = stub_->Generate(&c3, req);
  weft::v1::GenerateResponse r;
  EXPECT_FALSE(r3->Read(&r));
  EXPECT_EQ(r3->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  c1.TryCancel();
  c2.TryCancel();
  r1->Finish();
  r2->Finish();
}

TEST_F(GenerationServiceTest, ClientCancelReachesTheEngine) {
  weft::v1::GenerateRequest req;
  req.set_text("x");
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, req);
  ASSERT_TRUE(engine_.WaitFor([&] { return engine_.subs_.size() == 1; }));
  ctx.TryCancel();
  ASSERT_TRUE(engine_.WaitFor([&] { return engine_.cancelled_.size() == 1; }));
  EXPECT_EQ(engine_.cancelled_[0], engine_.subs_[0].key);
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_TRUE(engine_.WaitFor([&] { return gen_->open_streams() == 0; }));
}

// A cancel that lands while a write is in flight must still finish the call (OnDone
// runs, the stream slot is released); before the fix, ~1 in 30 such calls never ended
// and the server's Shutdown hung on them.
TEST_F(GenerationServiceTest, CancelDuringWritesAlwaysEndsTheCall) {
  weft::v1::GenerateRequest req;
  req.set_text("x");
  for (int i = 0; i < 60; ++i) {
    grpc::ClientContext ctx;
    auto reader = stub_->Generate(&ctx, req);
    ASSERT_TRUE(engine_.WaitFor([&] { return engine_.subs_.size() == static_cast<size_t>(i + 1); }));
    std::shared_ptr<Outbox> outbox;
    {
      MutexLock l(&engine_.mu_);
      outbox = engine_.subs_.back().outbox;
    }
    std::atomic<bool> stop{false};
    std::thread pusher([&] {
      weft::v1::GenerateResponse resp;
      resp.set_text(std::string(4096, 'a'));
      while (!stop.load()) {
        outbox->Push(resp);
        std::this_thread::yield();
      }
    });
    weft::v1::GenerateResponse r;
    for (int k = 0; k < (i % 4) + 1 && reader->Read(&r); ++k) {
    }
    ctx.TryCancel();
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
    ASSERT_TRUE(engine_.WaitFor([&] { return gen_->open_streams() == 0; })) << "call " << i;
    stop = true;
    pusher.join();
  }
}

// A client that never reads (tiny HTTP/2 window, no read asked for) leaves the server's
// write pending forever; Finish alone would wait behind it and the call would never
// end. Abort cuts the write short: the call ends and frees its stream slot, and the
// client sees the status once it reads.
TEST_F(GenerationServiceTest, AbortEndsACallWhoseClientNeverReads) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 5);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto stub = weft::v1::Generation::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials(), args));
  weft::v1::GenerateRequest req;
  req.set_text("x");
  grpc::ClientContext ctx;
  auto reader = stub->Generate(&ctx, req);
  ASSERT_TRUE(engine_.WaitFor([&] { return engine_.subs_.size() == 1; }));
  std::shared_ptr<Outbox> outbox;
  {
    MutexLock l(&engine_.mu_);
    outbox = engine_.subs_.back().outbox;
  }
  weft::v1::GenerateResponse resp;
  resp.set_text(std::string(1000, 'a'));  // far over the client's window
  ASSERT_TRUE(outbox->Push(resp));
  ASSERT_TRUE(outbox->Push(resp));
  ASSERT_TRUE(engine_.WaitFor([&] { return outbox->Stalled(absl::Now(), absl::Milliseconds(200)); }));
  EXPECT_EQ(gen_->open_streams(), 1);

  outbox->Abort(absl::ResourceExhaustedError("not reading"));
  // The slot goes back as the status is sent; the call is over (OnDone) once gRPC is done.
  EXPECT_TRUE(engine_.WaitFor([&] { return gen_->open_streams() == 0 && outbox->Done(); }))
      << "the call never ended";
  EXPECT_FALSE(outbox->Push(resp));

  weft::v1::GenerateResponse r;
  while (reader->Read(&r)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(GenerationServiceTest, ModelMetadataRoutesAndMustAgreeWithTheField) {
  weft::v1::GenerateRequest req;
  req.set_text("x");
  // The metadata alone selects the model; agreeing with the field is fine.
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-weft-model", "fake");
    auto reader = stub_->Generate(&ctx, req);
    ExpectSubmittedAndEnd(1);
    EXPECT_TRUE(reader->Finish().ok());
  }
  req.set_model("fake");
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-weft-model", "fake");
    auto reader = stub_->Generate(&ctx, req);
    ExpectSubmittedAndEnd(2);
    EXPECT_TRUE(reader->Finish().ok());
  }
  grpc::Status s = Rejected(req, {{"x-weft-model", "other"}});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("x-weft-model"), std::string::npos) << s.error_message();
  req.clear_model();
  s = Rejected(req, {{"x-weft-model", "other"}});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  s = Rejected(req, {{"x-weft-model", "fake"}, {"x-weft-model", "fake"}});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  // ListModels: a metadata naming another model is NOT_FOUND too.
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-weft-model", "other");
  weft::v1::ListModelsResponse models;
  EXPECT_EQ(stub_->ListModels(&ctx, weft::v1::ListModelsRequest(), &models).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(engine_.subs_.size(), 2u);
}

TEST_F(GenerationServiceTest, ARequestThatDoesNotParseIsInvalidArgumentNamingTheField) {
  weft::v1::GenerateRequest req;
  req.mutable_chat()->add_messages()->set_role("user");
  // Not UTF-8: the client's protobuf logs and sends it anyway; the server's refuses it.
  req.mutable_chat()->mutable_messages(0)->set_content(std::string("caf\xe9", 4));
  grpc::Status s = Rejected(req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("chat.messages[0].content: not valid UTF-8"), std::string::npos)
      << s.error_message();
  EXPECT_TRUE(engine_.subs_.empty());
}

// The token is checked before anything else: a call without one never reaches the
// engine, whatever its request; with one it goes on as usual.
TEST(GenerationServiceAuthTest, TokensAreCheckedBeforeAnyWork) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/services_test_tokens";
  {
    std::ofstream(path) << "# test\ntok-1\n";
  }
  BearerTokens::Options o;
  o.path = path;
  auto tokens = BearerTokens::Load(o);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ByteEncoder encoder;
  FakeEngine engine;
  ServiceMetrics metrics;
  RequestLimits lim;
  lim.vocab_size = 256;
  lim.max_model_len = 128;
  FrontendOptions opts;
  opts.model_name = "fake";
  opts.auth = tokens->get();
  GenerateFrontend frontend(opts, lim, &encoder, &engine, &metrics);
  GenerationService gen(&frontend);
  int port = 0;
  grpc::ServerBuilder b;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(&gen);
  auto server = b.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = weft::v1::Generation::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  auto call = [&](const std::string& authorization, const weft::v1::GenerateRequest& req) {
    grpc::ClientContext ctx;
    if (!authorization.empty()) ctx.AddMetadata("authorization", authorization);
    auto reader = stub->Generate(&ctx, req);
    if (authorization == "Bearer tok-1" && req.model().empty()) {
      EXPECT_TRUE(engine.WaitFor([&] { return engine.subs_.size() == 1; }));
      MutexLock l(&engine.mu_);
      engine.subs_.back().outbox->Finish(absl::OkStatus());
    }
    weft::v1::GenerateResponse r;
    while (reader->Read(&r)) {
    }
    return reader->Finish();
  };
  weft::v1::GenerateRequest bad;  // no prompt, unknown model: still UNAUTHENTICATED first
  bad.set_model("nope");
  weft::v1::GenerateRequest good;
  good.set_text("x");
  for (const std::string& a : {std::string(), std::string("Bearer wrong"), std::string("tok-1")}) {
    EXPECT_EQ(call(a, bad).error_code(), grpc::StatusCode::UNAUTHENTICATED) << a;
    grpc::Status s = call(a, good);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << a;
    EXPECT_EQ(s.error_message().find("tok-1"), std::string::npos);
  }
  EXPECT_TRUE(engine.subs_.empty());
  EXPECT_EQ(call("Bearer tok-1", bad).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(call("Bearer tok-1", good).ok());
  {
    grpc::ClientContext ctx;
    weft::v1::ListModelsResponse models;
    EXPECT_EQ(stub->ListModels(&ctx, weft::v1::ListModelsRequest(), &models).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer tok-1");
    weft::v1::ListModelsResponse models;
    EXPECT_TRUE(stub->ListModels(&ctx, weft::v1::ListModelsRequest(), &models).ok());
  }
  EXPECT_EQ(metrics.ByStatus("UNAUTHENTICATED").Value(), 6);
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
}

}  // namespace
}  // namespace weft

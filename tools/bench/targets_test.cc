// Target specs, the requests each target sends, and llama-server event accounting
// (token counts, held-back tokens, the final cross-check, errors).
#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "grpcpp/grpcpp.h"

#include "common/testing/status_matchers.h"
#include "tools/bench/grpc_target.h"
#include "tools/bench/http_client.h"
#include "tools/bench/llama_target.h"
#include "tools/bench/target.h"

namespace weft {
namespace bench {
namespace {

using ::weft::testing::StatusIs;

SseEvent Data(const std::string& json) {
  SseEvent e;
  e.data = json;
  return e;
}

TEST(LlamaAccumulatorTest, OneTokenPerEventThenFinal) {
  RequestRecord rec;
  std::atomic<int64_t> live{0};
  LlamaStreamAccumulator acc(&rec, &live);
  acc.OnEvent(Data(R"({"content":"a","tokens":[5],"stop":false,"tokens_predicted":1})"), 10);
  acc.OnEvent(Data(R"({"content":"b","tokens":[6],"stop":false,"tokens_predicted":2})"), 20);
  acc.OnEvent(Data(R"({"content":"","tokens":[],"stop":true,"tokens_predicted":2,
                      "timings":{"predicted_n":2,"cache_n":0}})"), 25);
  ASSERT_TRUE(acc.Finish().ok()) << acc.Finish();
  EXPECT_EQ(rec.output_tokens, 2);
  ASSERT_EQ(rec.arrivals.size(), 2u);
  EXPECT_EQ(rec.arrivals[1].t_ns, 20);
  EXPECT_EQ(rec.server_output_tokens, 2);
  EXPECT_EQ(rec.cached_prompt_tokens, 0);
  EXPECT_EQ(live.load(), 2);
}

TEST(LlamaAccumulatorTest, HeldBackTokenArrivesWithTheNext) {
  // Token 2 ended inside a UTF-8 character: no event for it; event 3 reports 3 decoded.
  RequestRecord rec;
  LlamaStreamAccumulator acc(&rec, nullptr);
  acc.OnEvent(Data(R"({"content":"a","stop":false,"tokens_predicted":1})"), 10);
  acc.OnEvent(Data(R"({"content":"\u00e9","stop":false,"tokens_predicted":3})"), 30);
  acc.OnEvent(Data(R"({"content":"","stop":true,"timings":{"predicted_n":3}})"), 31);
  ASSERT_TRUE(acc.Finish().ok());
  EXPECT_EQ(rec.output_tokens, 3);
  ASSERT_EQ(rec.arrivals.size(), 2u);
  EXPECT_EQ(rec.arrivals[1].num_tokens, 2);
  EXPECT_EQ(rec.server_output_tokens, 3);
}

TEST(LlamaAccumulatorTest, NoCountsMeansOneTokenPerEventAndFinalFillsTheRest) {
  RequestRecord rec;
  LlamaStreamAccumulator acc(&rec, nullptr);
  acc.OnEvent(Data(R"({"content":"a","stop":false})"), 10);
  acc.OnEvent(Data(R"({"content":"bc","tokens":[1,2],"stop":false})"), 20);
  acc.OnEvent(Data(R"({"content":"","stop":true,"tokens_predicted":5})"), 30);
  ASSERT_TRUE(acc.Finish().ok());
  EXPECT_EQ(rec.output_tokens, 5);
  ASSERT_EQ(rec.arrivals.size(), 3u);
  EXPECT_EQ(rec.arrivals[1].num_tokens, 2);
  EXPECT_EQ(rec.arrivals[2].num_tokens, 2);  // reported but never streamed
}

TEST(LlamaAccumulatorTest, FinalReportingFewerTokensIsAMismatchNotAFix) {
  RequestRecord rec;
  LlamaStreamAccumulator acc(&rec, nullptr);
  acc.OnEvent(Data(R"({"content":"a","stop":false})"), 10);
  acc.OnEvent(Data(R"({"content":"b","stop":false})"), 20);
  acc.OnEvent(Data(R"({"stop":true,"tokens_predicted":1})"), 30);
  EXPECT_EQ(rec.output_tokens, 2);
  EXPECT_EQ(rec.server_output_tokens, 1);
}

TEST(LlamaAccumulatorTest, Errors) {
  {
    RequestRecord rec;
    LlamaStreamAccumulator acc(&rec, nullptr);
    SseEvent e;
    e.error = R"({"code":500,"message":"slot unavailable"})";
    acc.OnEvent(e, 1);
    EXPECT_THAT(acc.Finish(), StatusIs(absl::StatusCode::kInternal));
    EXPECT_NE(acc.Finish().message().find("slot unavailable"), std::string::npos);
  }
  {
    RequestRecord rec;
    LlamaStreamAccumulator acc(&rec, nullptr);
    acc.OnEvent(Data(R"({"error":{"code":400,"message":"bad"}})"), 1);
    EXPECT_FALSE(acc.Finish().ok());
  }
  {
    RequestRecord rec;
    LlamaStreamAccumulator acc(&rec, nullptr);
    acc.OnEvent(Data(R"({"content":"a","stop":false})"), 1);
    EXPECT_THAT(acc.Finish(), StatusIs(absl::StatusCode::kDataLoss));  // no final event
  }
  {
    RequestRecord rec;
    LlamaStreamAccumulator acc(&rec, nullptr);
    acc.OnEvent(Data("{not json"), 1);
    EXPECT_THAT(acc.Finish(), StatusIs(absl::StatusCode::kDataLoss));
  }
}

TEST(LlamaHttpTargetTest, BodyAsksForTokenIdsIgnoreEosGreedyStreamNoCache) {
  RequestOptions o;
  LlamaHttpTarget t("llama", HttpEndpoint{"127.0.0.1", 8080, ""}, o);
  TraceRequest r;
  r.prompt = {300, 40000, 12345};
  r.max_tokens = 17;
  const nlohmann::json j = nlohmann::json::parse(t.BuildBody(r));
  EXPECT_EQ(j["prompt"], nlohmann::json({300, 40000, 12345}));
  EXPECT_EQ(j["n_predict"], 17);
  EXPECT_EQ(j["ignore_eos"], true);
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["temperature"], 0);
  EXPECT_EQ(j["cache_prompt"], false);
}

TEST(GrpcTargetTest, RequestIsTokenIdsIgnoreEosGreedy) {
  RequestOptions o;
  o.model = "m";
  GrpcTarget t("weft", "127.0.0.1:1", o);
  TraceRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 9;
  const weft::v1::GenerateRequest req = t.BuildRequest(r);
  EXPECT_EQ(req.model(), "m");
  ASSERT_TRUE(req.has_token_ids());
  EXPECT_EQ(req.token_ids().ids_size(), 3);
  EXPECT_EQ(req.token_ids().ids(2), 3);
  EXPECT_EQ(req.stopping().max_tokens(), 9);
  EXPECT_TRUE(req.stopping().ignore_eos());
  ASSERT_TRUE(req.sampling().has_temperature());
  EXPECT_EQ(req.sampling().temperature(), 0.0f);
}

// A server that allows 2 streams per connection and holds each Generate until 6 run at
// once (or 20 s pass): with 2 streams per connection the target opens 3 connections and
// all 6 calls run together; on one connection only 2 would.
class HoldingGeneration final : public weft::v1::Generation::Service {
 public:
  grpc::Status Generate(grpc::ServerContext*, const weft::v1::GenerateRequest*,
                        grpc::ServerWriter<weft::v1::GenerateResponse>* writer) override {
    {
      MutexLock l(&mu_);
      ++active_;
      max_active_ = std::max(max_active_, active_);
      const absl::Time deadline = absl::Now() + absl::Seconds(20);
      while (active_ < 6 && released_ == 0 && absl::Now() < deadline) {
        cv_.WaitWithTimeout(&mu_, absl::Milliseconds(50));
      }
      ++released_;
      cv_.SignalAll();
    }
    weft::v1::GenerateResponse r;
    r.add_token_ids(7);
    writer->Write(r);
    MutexLock l(&mu_);
    --active_;
    return grpc::Status::OK;
  }
  int max_active() {
    MutexLock l(&mu_);
    return max_active_;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  int max_active_ ABSL_GUARDED_BY(mu_) = 0;
  int released_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(GrpcTargetTest, OpensConnectionsBeyondTheServersStreamsPerConnection) {
  HoldingGeneration service;
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 2);
  b.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  ASSERT_NE(server, nullptr);
  RequestOptions o;
  o.grpc_streams_per_connection = 2;
  o.timeout_s = 60;
  GrpcTarget t("weft", absl::StrCat("127.0.0.1:", port), o);
  RunClock clock;
  std::vector<RequestRecord> records(6);
  std::vector<std::thread> clients;
  for (RequestRecord& rec : records) {
    clients.emplace_back([&t, &clock, &rec] {
      TraceRequest r;
      r.prompt = {1, 2};
      r.max_tokens = 1;
      t.Run(r, clock, nullptr, &rec);
    });
  }
  for (std::thread& c : clients) c.join();
  for (const RequestRecord& rec : records) EXPECT_TRUE(rec.status.ok()) << rec.status;
  EXPECT_EQ(service.max_active(), 6);
  EXPECT_EQ(t.connections(), 3);
  server->Shutdown();
}

TEST(MakeTargetTest, SpecsAndLabels) {
  RequestOptions o;
  auto a = MakeTarget("grpc://127.0.0.1:50051", o);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->label(), "grpc://127.0.0.1:50051");
  auto b = MakeTarget("llama=http://localhost:8080", o);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->label(), "llama");
  EXPECT_FALSE(MakeTarget("grpc://nohostport", o).ok());
  EXPECT_FALSE(MakeTarget("https://x:1", o).ok());
  EXPECT_FALSE(MakeTarget("127.0.0.1:50051", o).ok());
}

TEST(ParseHttpUrlTest, Forms) {
  auto a = ParseHttpUrl("http://h:81/v1/x");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "h");
  EXPECT_EQ(a->port, 81);
  EXPECT_EQ(a->path, "/v1/x");
  auto b = ParseHttpUrl("http://[::1]:8080");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, 8080);
  auto c = ParseHttpUrl("http://host");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->port, 80);
  EXPECT_FALSE(ParseHttpUrl("http://h:0").ok());
  EXPECT_FALSE(ParseHttpUrl("http://:80").ok());
}

TEST(RequestOptionsTest, Validate) {
  RequestOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.temperature = -1;
  EXPECT_FALSE(o.Validate().ok());
  o.temperature = 0;
  o.timeout_s = 0;
  EXPECT_FALSE(o.Validate().ok());
  o.timeout_s = 1;
  o.grpc_streams_per_connection = 0;
  EXPECT_FALSE(o.Validate().ok());
}

}  // namespace
}  // namespace bench
}  // namespace weft

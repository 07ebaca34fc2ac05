// Target specs, the requests each target sends, and llama-server event accounting
// (token counts, held-back tokens, the final cross-check, errors).
#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

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
}

}  // namespace
}  // namespace bench
}  // namespace weft

// End to end, real processes: tenants, request ids and the access log (issue 30).
// One scheduler with --auth_tokens_file mapping tokens to tenants with limits, and the
// OpenAI HTTP API on; one worker.
//  * priority above the tenant's highest (or above the default 0 for a token without
//    max_priority=) is PERMISSION_DENIED before any work (before: any client could ask
//    for any priority and preempt everyone);
//  * a tenant's max_streams and tokens_per_minute are RESOURCE_EXHAUSTED, counted per
//    tenant; the other tenants are served meanwhile;
//  * x-request-id (gRPC metadata), client_request_id and X-Request-Id (HTTP) are echoed
//    (generated when absent), and each call leaves one access-log line with its id and
//    tenant — never the prompt or the token;
//  * the tokens file deleted: every token refused (fails closed) and the failed reload
//    counted; put back: served again.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "tests/e2e/process_harness.h"

namespace weft::e2e {
namespace {

constexpr char kPython[] = "/usr/bin/python3";
constexpr char kPrompt[] = "The capital of France is";

class EdgeTenantsE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::FindModelFile();
    if (model_.empty()) GTEST_SKIP() << "no model file (tools/bootstrap.sh)";
    cluster_ = std::make_unique<Cluster>(model_);
    tokens_ = cluster_->dir() + "/tokens";
    WriteTokens();
    ASSERT_TRUE(cluster_->StartScheduler({"--auth_tokens_file=" + tokens_, "--http_port=0"}).ok())
        << cluster_->Logs();
    WorkerSpec w;
    w.num_kv_blocks = 128;
    ASSERT_TRUE(cluster_->StartWorker(w).ok()) << cluster_->Logs();
    ASSERT_TRUE(cluster_->WaitReplicas(1).ok()) << cluster_->Logs();
  }
  void WriteTokens() {
    std::ofstream(tokens_ + ".tmp") << "tok-plain-0001\n"
                                    << "tok-a-0001 tenant=team-a max_streams=1 max_priority=5\n"
                                    << "tok-b-0001 tenant=team-b tokens_per_minute=40\n"
                                    << "tok-c-0001 tenant=team-c tokens_per_minute=100\n";
    ASSERT_EQ(std::rename((tokens_ + ".tmp").c_str(), tokens_.c_str()), 0);
  }
  StreamResult Call(const std::string& token, int priority, int max_tokens = 4,
                    grpc::ClientContext* ctx = nullptr) {
    grpc::ClientContext local;
    if (ctx == nullptr) ctx = &local;
    ctx->AddMetadata("authorization", "Bearer " + token);
    weft::v1::GenerateRequest req = GreedyRequest(kPrompt, max_tokens);
    req.set_priority(priority);
    return Generate(cluster_->stub(), req, absl::Seconds(120), {}, ctx);
  }
  double Metric(const std::string& s) { return cluster_->Metric(s); }

  std::string model_, tokens_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(EdgeTenantsE2eTest, PriorityStreamsAndTokensPerMinuteAreEnforcedPerTenant) {
  // Priority: the default tenant may not ask above 0; team-a up to 5.
  const absl::Time t0 = absl::Now();
  StreamResult r = Call("tok-plain-0001", 1);
  const absl::Duration refuse = absl::Now() - t0;
  EXPECT_EQ(CodeName(r.status.error_code()), "PERMISSION_DENIED") << r.status.error_message();
  EXPECT_TRUE(Call("tok-plain-0001", 0).status.ok());
  EXPECT_TRUE(Call("tok-plain-0001", -3).status.ok());
  EXPECT_TRUE(Call("tok-a-0001", 5).status.ok());
  EXPECT_EQ(CodeName(Call("tok-a-0001", 6).status.error_code()), "PERMISSION_DENIED");
  std::cout << "RELIABILITY priority above the tenant's: PERMISSION_DENIED in "
            << absl::FormatDuration(refuse) << std::endl;

  // max_streams=1: a second call of team-a while one runs is refused; others go on.
  // Every earlier call gave its slot back before its status reached us.
  ASSERT_EQ(Metric("weft_streams_open"), 0);
  auto long_call = std::make_unique<grpc::ClientContext>();
  long_call->AddMetadata("authorization", "Bearer tok-a-0001");
  // BackgroundStream makes its own context (no token): the long call runs here.
  std::atomic<int> got{0};
  StreamResult long_result;
  std::thread t([&] {
    weft::v1::GenerateRequest req = GreedyRequest(kPrompt, 200);
    long_result = Generate(cluster_->stub(), req, absl::Seconds(120),
                           [&](const weft::v1::GenerateResponse& m) {
                             got += m.token_ids_size();
                             return true;
                           },
                           long_call.get());
  });
  ASSERT_TRUE(WaitFor([&] { return got.load() >= 1; }, absl::Seconds(60))) << cluster_->Logs();
  StreamResult second = Call("tok-a-0001", 0);
  EXPECT_EQ(CodeName(second.status.error_code()), "RESOURCE_EXHAUSTED")
      << second.status.error_message();
  EXPECT_TRUE(Call("tok-plain-0001", 0).status.ok()) << "another tenant is served meanwhile";
  long_call->TryCancel();
  t.join();
  EXPECT_TRUE(WaitFor([&] { return Metric("weft_streams_open") == 0; }, absl::Seconds(30)));
  EXPECT_TRUE(Call("tok-a-0001", 0).status.ok()) << "its slot came back";

  // tokens_per_minute=40: 5 prompt tokens + 40 max_tokens empties the bucket.
  EXPECT_TRUE(Call("tok-b-0001", 0, 40).status.ok());
  StreamResult over = Call("tok-b-0001", 0, 4);
  EXPECT_EQ(CodeName(over.status.error_code()), "RESOURCE_EXHAUSTED") << over.status.error_message();

  auto m = cluster_->Metrics();
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->Get("weft_tenant_requests_rejected_total{reason=\"priority\",tenant=\"default\"}"), 1)
      << m->text();
  EXPECT_EQ(m->Get("weft_tenant_requests_rejected_total{reason=\"priority\",tenant=\"team-a\"}"), 1);
  EXPECT_EQ(m->Get("weft_tenant_requests_rejected_total{reason=\"streams\",tenant=\"team-a\"}"), 1);
  EXPECT_EQ(
      m->Get("weft_tenant_requests_rejected_total{reason=\"tokens_per_minute\",tenant=\"team-b\"}"),
      1);
  EXPECT_GE(m->Get("weft_tenant_requests_admitted_total{tenant=\"default\"}"), 3);
}

TEST_F(EdgeTenantsE2eTest, RequestIdsAreEchoedAndEachCallIsLoggedOnce) {
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-request-id", "req-grpc-42");
  ASSERT_TRUE(Call("tok-a-0001", 0, 4, &ctx).status.ok());
  auto md = ctx.GetServerInitialMetadata();
  auto it = md.find("x-request-id");
  ASSERT_NE(it, md.end());
  EXPECT_EQ(std::string(it->second.data(), it->second.size()), "req-grpc-42");
  // None given: one is made (32 hex digits); a bad one is replaced.
  grpc::ClientContext none;
  ASSERT_TRUE(Call("tok-plain-0001", 0, 2, &none).status.ok());
  auto made = none.GetServerInitialMetadata().find("x-request-id");
  ASSERT_NE(made, none.GetServerInitialMetadata().end());
  EXPECT_EQ(made->second.size(), 32u);
  grpc::ClientContext bad;
  bad.AddMetadata("x-request-id", "bad id with spaces");
  ASSERT_TRUE(Call("tok-plain-0001", 0, 2, &bad).status.ok());
  EXPECT_EQ(bad.GetServerInitialMetadata().find("x-request-id")->second.size(), 32u);
  // Refused calls carry it too.
  grpc::ClientContext refused;
  refused.AddMetadata("x-request-id", "req-refused-1");
  EXPECT_FALSE(Call("tok-plain-0001", 9, 2, &refused).status.ok());
  EXPECT_EQ(refused.GetServerInitialMetadata().count("x-request-id"), 1u);

  // HTTP: X-Request-Id echoed; absent: made.
  if (::access(kPython, X_OK) == 0) {
    const std::string script = absl::StrCat(
        "import http.client, json, sys\n"
        "def post(rid, token):\n"
        "  c = http.client.HTTPConnection('127.0.0.1', ", cluster_->http_port(), ", timeout=120)\n"
        "  h = {'Authorization': 'Bearer ' + token, 'Content-Type': 'application/json'}\n"
        "  if rid: h['X-Request-Id'] = rid\n"
        "  c.request('POST', '/v1/completions', json.dumps({'prompt': 'Hello', 'max_tokens': 2}), h)\n"
        "  r = c.getresponse(); r.read()\n"
        "  return r.status, r.getheader('X-Request-Id')\n"
        "print(post('req-http-7', 'tok-a-0001')); print(post(None, 'tok-plain-0001'))\n");
    RunResult py = RunToEnd({kPython, "-I", "-c", script}, absl::Seconds(120));
    ASSERT_EQ(py.code, 0) << py.log;
    EXPECT_TRUE(absl::StrContains(py.out, "(200, 'req-http-7')")) << py.out;
    EXPECT_TRUE(absl::StrContains(py.out, "(200, '")) << py.out;
  }
  // The access log: one line per call with its id and tenant; no prompt, no token.
  ASSERT_TRUE(WaitFor(
      [&] {
        return absl::StrContains(ReadFile(cluster_->scheduler()->log_path()),
                                 "access id=req-http-7 tenant=team-a");
      },
      absl::Seconds(30)))
      << cluster_->Logs();
  const std::string log = ReadFile(cluster_->scheduler()->log_path());
  EXPECT_TRUE(absl::StrContains(log, "access id=req-grpc-42 tenant=team-a model=")) << log;
  EXPECT_TRUE(absl::StrContains(log, "status=OK prompt_tokens=5 completion_tokens=4 ttft_ms="))
      << log;
  EXPECT_TRUE(absl::StrContains(log, "access id=req-refused-1 tenant=- ")) << log;
  EXPECT_TRUE(absl::StrContains(log, "status=PERMISSION_DENIED")) << log;
  size_t lines = 0;
  for (size_t p = log.find("access id=req-grpc-42 "); p != std::string::npos;
       p = log.find("access id=req-grpc-42 ", p + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 1u);
  EXPECT_FALSE(absl::StrContains(log, "tok-a-0001")) << "a token in the log";
  EXPECT_FALSE(absl::StrContains(log, kPrompt)) << "a prompt in the log";
}

// A tenant with max_streams=1 that sends each call as soon as the last one ended is
// served every time: the slot goes back before the end reaches the client (before: it
// went back once gRPC, or the HTTP connection, was done with the call, and a quick
// client was refused now and then).
TEST_F(EdgeTenantsE2eTest, BackToBackCallsOfAOneStreamTenantAreAllServed) {
  for (int i = 0; i < 8; ++i) {
    StreamResult r = Call("tok-a-0001", 0, 2);
    ASSERT_TRUE(r.status.ok()) << "gRPC call " << i << ": " << CodeName(r.status.error_code())
                               << " " << r.status.error_message();
  }
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << "no " << kPython;
  // One keep-alive connection and a new one per call; streamed and not.
  const std::string script = absl::StrCat(
      "import http.client, json\n"
      "keep = http.client.HTTPConnection('127.0.0.1', ", cluster_->http_port(), ", timeout=120)\n"
      "h = {'Authorization': 'Bearer tok-a-0001', 'Content-Type': 'application/json'}\n"
      "for i in range(12):\n"
      "  c = keep if i % 2 else http.client.HTTPConnection('127.0.0.1', ",
      cluster_->http_port(), ", timeout=120)\n"
      "  body = {'prompt': 'Hello', 'max_tokens': 2, 'stream': i % 4 < 2}\n"
      "  c.request('POST', '/v1/completions', json.dumps(body), h)\n"
      "  r = c.getresponse(); data = r.read().decode()\n"
      "  done = (not body['stream']) or data.rstrip().endswith('data: [DONE]')\n"
      "  print(i, r.status, done)\n");
  RunResult py = RunToEnd({kPython, "-I", "-c", script}, absl::Seconds(120));
  ASSERT_EQ(py.code, 0) << py.log;
  for (int i = 0; i < 12; ++i) {
    EXPECT_TRUE(absl::StrContains(py.out, absl::StrCat(i, " 200 True\n"))) << py.out;
  }
  EXPECT_EQ(Metric("weft_tenant_requests_admitted_total{tenant=\"team-a\"}"), 20);
}

// Tokens per minute are charged up front (prompt + max_tokens x n) and what a call did
// not use comes back when it ends: here a call cancelled after its first token. Without
// the refund the bucket would stay 40 under zero for 24 s and the last call be refused.
TEST_F(EdgeTenantsE2eTest, UnusedTokensPerMinuteComeBackWhenACallEnds) {
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer tok-c-0001");
  ctx.AddMetadata("x-request-id", "req-refund-1");
  StreamResult first = Generate(cluster_->stub(), GreedyRequest(kPrompt, 90), absl::Seconds(120),
                                [&](const weft::v1::GenerateResponse&) {
                                  ctx.TryCancel();  // 5 + 90 charged; about 89 unused
                                  return true;
                                },
                                &ctx);
  EXPECT_EQ(CodeName(first.status.error_code()), "CANCELLED");
  // Its end is its access line (the refund runs with it).
  ASSERT_TRUE(WaitFor(
      [&] {
        return absl::StrContains(ReadFile(cluster_->scheduler()->log_path()),
                                 "access id=req-refund-1 tenant=team-c");
      },
      absl::Seconds(30)))
      << cluster_->Logs();
  StreamResult second = Call("tok-c-0001", 0, 40);
  ASSERT_TRUE(second.status.ok()) << second.status.error_message();
  StreamResult third = Call("tok-c-0001", 0, 4);
  EXPECT_TRUE(third.status.ok()) << CodeName(third.status.error_code()) << " "
                                 << third.status.error_message();
}

TEST_F(EdgeTenantsE2eTest, ADeletedTokensFileFailsClosedAndCountsTheFailedReload) {
  ASSERT_TRUE(Call("tok-plain-0001", 0).status.ok());
  ASSERT_EQ(::unlink(tokens_.c_str()), 0);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(WaitFor(
      [&] {
        return CodeName(Call("tok-plain-0001", 0, 1).status.error_code()) == "UNAUTHENTICATED";
      },
      absl::Seconds(30)))
      << "the old tokens stayed valid after the file was deleted\n" << cluster_->Logs();
  std::cout << "RELIABILITY tokens file deleted: every token UNAUTHENTICATED within "
            << absl::FormatDuration(absl::Now() - t0) << std::endl;
  EXPECT_EQ(Metric("weft_auth_reload_failures_total"), 1);
  WriteTokens();
  ASSERT_TRUE(WaitFor([&] { return Call("tok-plain-0001", 0, 1).status.ok(); }, absl::Seconds(30)))
      << cluster_->Logs();
  StreamResult r = Call("tok-a-0001", 0, 4);
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.token_ids.size(), 4u);
}

}  // namespace
}  // namespace weft::e2e

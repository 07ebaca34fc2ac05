// End to end, real processes: PyPI's official `openai` Python client (a venv outside the
// repository, made by openai_venv.sh) drives weft-scheduler's OpenAI-compatible HTTP API
// (--http_port) against a real worker and the real model; openai_client.py asserts each
// call. Here: its greedy text equals the gRPC API's for the same prompt (one engine),
// its calls are counted by the scheduler like gRPC calls, a client that leaves (a stream
// closed after 3 chunks, a non-streamed call that times out) is cancelled and its KV
// blocks freed, without a replica every generation call is 503, and the public surface's
// TLS and bearer tokens guard the HTTP port as they guard gRPC.
// Skips, saying why, only when the package index cannot be reached to make the venv.
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/model_path.h"
#include "common/testing/test_certs.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/openai_python.h"
#include "tests/e2e/process_harness.h"

namespace weft::e2e {
namespace {

constexpr char kPrompt[] = "The quick brown fox";
constexpr int kMaxTokens = 12;

class OpenAiHttpE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!OpenAiPython().skip.empty()) GTEST_SKIP() << OpenAiPython().skip;
    ASSERT_TRUE(OpenAiPython().error.empty()) << OpenAiPython().error;
  }

  // Runs one phase of openai_client.py against `cluster`'s HTTP port.
  static RunResult Client(const Cluster& cluster, const std::string& phase) {
    return RunOpenAiClient(
        {absl::StrCat("--base_url=http://127.0.0.1:", cluster.http_port(), "/v1"),
         absl::StrCat("--phase=", phase), absl::StrCat("--prompt=", kPrompt),
         absl::StrCat("--max_tokens=", kMaxTokens)});
  }

  // A scheduler with the HTTP API and one worker.
  static void StartServing(Cluster& cluster) {
    ASSERT_TRUE(cluster.StartScheduler({"--http_port=0"}).ok()) << cluster.Logs();
    ASSERT_GT(cluster.http_port(), 0);
    WorkerSpec w;
    w.num_kv_blocks = 256;  // a 3000-token request fits; leaks stay visible
    w.threads = 2;
    ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
    ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();
  }
};

TEST_F(OpenAiHttpE2eTest, OfficialClientGetsWhatTheGrpcApiGives) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  Cluster cluster(model);
  StartServing(cluster);

  RunResult py = Client(cluster, "serve");
  ASSERT_EQ(py.code, 0) << "openai_client.py failed:\n"
                        << py.log << py.out << "\n"
                        << cluster.Logs();
  const nlohmann::json printed = PrintedJson(py.out, "greedy_text");
  ASSERT_TRUE(printed.is_string()) << py.out;
  const std::string http_text = printed.get<std::string>();

  // One engine: the greedy answer over gRPC is the same text.
  StreamResult grpc = Generate(cluster.stub(), GreedyRequest(kPrompt, kMaxTokens));
  ASSERT_TRUE(grpc.status.ok()) << grpc.status.error_message();
  EXPECT_EQ(http_text, grpc.text);

  // The client's calls reached the engine and were counted as gRPC calls are: 11
  // answered (+ the gRPC one), 3 bad requests, 1 unknown model; every block came back.
  auto m = cluster.Metrics();
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->Get("weft_requests_status_total{code=\"OK\"}"), 12);
  EXPECT_EQ(m->Get("weft_requests_status_total{code=\"INVALID_ARGUMENT\"}"), 3);
  EXPECT_EQ(m->Get("weft_requests_status_total{code=\"NOT_FOUND\"}"), 1);
  EXPECT_EQ(m->Get("weft_http_responses_total{code=\"400\"}"), 3);
  EXPECT_EQ(m->Get("weft_http_responses_total{code=\"404\"}"), 1);
  EXPECT_TRUE(
      WaitFor([&] { return cluster.Metric("weft_kv_blocks_used") == 0; }, absl::Seconds(30)));
}

TEST_F(OpenAiHttpE2eTest, ClientThatLeavesIsCancelledAndItsBlocksFreed) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  Cluster cluster(model);
  StartServing(cluster);
  // A labelled counter appears with its first increment: absent counts as 0.
  auto count = [&](const std::string& series) {
    auto m = cluster.Metrics();
    return m.ok() ? m->Get(series, 0) : -1;
  };
  const std::string cancelled = "weft_requests_finished_total{reason=\"cancelled\"}";
  ASSERT_EQ(count(cancelled), 0);

  // A stream left after 3 chunks and a non-streamed call that times out after 2 s, both
  // asking for 3000 tokens.
  RunResult py = Client(cluster, "disconnect");
  ASSERT_EQ(py.code, 0) << "openai_client.py failed:\n"
                        << py.log << py.out << "\n"
                        << cluster.Logs();

  EXPECT_TRUE(WaitFor([&] { return count(cancelled) == 2; }, absl::Seconds(60)))
      << "cancelled: " << count(cancelled) << "\n"
      << cluster.Logs();
  EXPECT_TRUE(
      WaitFor([&] { return cluster.Metric("weft_kv_blocks_used") == 0; }, absl::Seconds(30)))
      << "blocks used: " << cluster.Metric("weft_kv_blocks_used");
  EXPECT_TRUE(WaitFor([&] { return cluster.Metric("weft_streams_open") == 0; }, absl::Seconds(30)));
  auto m = cluster.Metrics();
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->Get("weft_requests_status_total{code=\"CANCELLED\"}"), 2);
  EXPECT_EQ(m->Get("weft_requests_finished_total{reason=\"length\"}"),
            0);                                                     // neither ran to its end
  EXPECT_EQ(m->Get("weft_http_responses_total{code=\"499\"}"), 1);  // the non-streamed one
}

TEST_F(OpenAiHttpE2eTest, NoReplicaIs503) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler({"--http_port=0"}).ok()) << cluster.Logs();
  RunResult py = Client(cluster, "no_replica");
  ASSERT_EQ(py.code, 0) << "openai_client.py failed:\n"
                        << py.log << py.out << "\n"
                        << cluster.Logs();
  EXPECT_EQ(cluster.Metric("weft_requests_status_total{code=\"UNAVAILABLE\"}"), 4);
  EXPECT_EQ(cluster.Metric("weft_http_responses_total{code=\"503\"}"), 5);  // + /health
}

// The public surface's TLS and tokens on the HTTP port (the gRPC port's flags, one set):
// PyPI's client over HTTPS with the test CA (made by openssl at test time) gets
// AuthenticationError without a token or with a wrong one — none of those calls reaches
// the engine — and answers with the right one; /health needs none; plaintext and a
// client trusting another CA cannot connect; and the x-weft-model header cases.
TEST_F(OpenAiHttpE2eTest, TokensAndTlsGuardTheHttpPortAsTheyGuardGrpc) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  auto certs = testing::MakeTestCerts();
  ASSERT_TRUE(certs.ok()) << certs.status();
  const std::string tokens = *certs + "/tokens";
  constexpr char kToken[] = "tok-http-5678";
  std::ofstream(tokens) << "# HTTP API tokens\n" << kToken << "\n";
  Cluster cluster(model);
  ClientTlsFiles tls;  // the harness's own gRPC calls (health, readiness)
  tls.ca = *certs + "/ca.crt";
  cluster.SetClientTls(tls);
  ASSERT_TRUE(
      cluster
          .StartScheduler({"--http_port=0", "--tls_cert=" + *certs + "/server.crt",
                           "--tls_key=" + *certs + "/server.key", "--auth_tokens_file=" + tokens})
          .ok())
      << cluster.Logs();
  WorkerSpec w;
  w.threads = 2;
  ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();
  const double prompt_tokens_before = cluster.Metric("weft_prompt_tokens_total");

  RunResult py =
      RunOpenAiClient({absl::StrCat("--base_url=https://127.0.0.1:", cluster.http_port(), "/v1"),
                       "--phase=auth", "--ca=" + *certs + "/ca.crt",
                       "--other_ca=" + *certs + "/other-ca.crt", absl::StrCat("--token=", kToken)});
  ASSERT_EQ(py.code, 0) << "openai_client.py failed:\n"
                        << py.log << py.out << "\n"
                        << cluster.Logs();
  const nlohmann::json calls = PrintedJson(py.out, "calls");
  ASSERT_TRUE(calls.is_object()) << py.out;

  // Refused generation calls are counted as gRPC's are and never reached the engine: the
  // answered ones' prompts alone were admitted.
  auto m = cluster.Metrics();
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->Get("weft_requests_status_total{code=\"UNAUTHENTICATED\"}"),
            calls["refused"].get<double>());
  EXPECT_EQ(calls["refused"], 4);
  EXPECT_EQ(m->Get("weft_requests_status_total{code=\"OK\"}"), calls["ok"].get<double>());
  EXPECT_EQ(m->Get("weft_requests_status_total{code=\"INVALID_ARGUMENT\"}"), 1);
  EXPECT_EQ(m->Get("weft_requests_status_total{code=\"NOT_FOUND\"}"), 1);
  EXPECT_EQ(m->Get("weft_http_responses_total{code=\"401\"}"), 6);  // + 2 x /v1/models
  EXPECT_EQ(m->Get("weft_prompt_tokens_total") - prompt_tokens_before,
            calls["prompt_tokens"].get<double>());
}

}  // namespace
}  // namespace weft::e2e

// End to end, real processes: PyPI's official `openai` Python client (a venv outside the
// repository, made by openai_venv.sh) drives weft-scheduler's OpenAI-compatible HTTP API
// (--http_port) against a real worker and the real model; openai_client.py asserts each
// call. Here: its greedy text equals the gRPC API's for the same prompt (one engine),
// its calls are counted by the scheduler like gRPC calls, a client that leaves (a stream
// closed after 3 chunks, a non-streamed call that times out) is cancelled and its KV
// blocks freed, and without a replica every generation call is 503.
// Skips, saying why, only when the package index cannot be reached to make the venv.
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/process_harness.h"

namespace weft::e2e {
namespace {

constexpr absl::Duration kVenvTimeout = absl::Seconds(600);
constexpr absl::Duration kClientTimeout = absl::Seconds(300);
constexpr char kPrompt[] = "The quick brown fox";
constexpr int kMaxTokens = 12;

class OpenAiHttpE2eTest : public ::testing::Test {
 protected:
  // The venv is made once for the suite (minutes on a fresh machine, then reused).
  static void SetUpTestSuite() {
    RunResult venv = RunToEnd({"/bin/bash", Runfile("tests/e2e/openai_venv.sh")}, kVenvTimeout);
    if (venv.code == 3) {
      Skip() = absl::StrCat("PyPI's openai client cannot be installed: ", venv.log);
    } else if (venv.code != 0) {
      Error() = absl::StrCat("openai_venv.sh failed (exit ", venv.code, "):\n", venv.log);
    } else {
      Python() = std::string(absl::StripAsciiWhitespace(venv.out));
    }
  }
  static std::string& Python() {
    static std::string s;
    return s;
  }
  static std::string& Skip() {
    static std::string s;
    return s;
  }
  static std::string& Error() {
    static std::string s;
    return s;
  }

  void SetUp() override {
    if (!Skip().empty()) GTEST_SKIP() << Skip();
    ASSERT_TRUE(Error().empty()) << Error();
  }

  // Runs one phase of openai_client.py against `cluster`'s HTTP port.
  static RunResult Client(const Cluster& cluster, const std::string& phase) {
    return RunToEnd({Python(), Runfile("tests/e2e/openai_client.py"),
                     absl::StrCat("--base_url=http://127.0.0.1:", cluster.http_port(), "/v1"),
                     absl::StrCat("--phase=", phase), absl::StrCat("--prompt=", kPrompt),
                     absl::StrCat("--max_tokens=", kMaxTokens)},
                    kClientTimeout);
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
  std::string http_text;
  bool found = false;
  for (absl::string_view line : absl::StrSplit(py.out, '\n')) {
    if (absl::ConsumePrefix(&line, "greedy_text: ")) {
      http_text = nlohmann::json::parse(line).get<std::string>();
      found = true;
    }
  }
  ASSERT_TRUE(found) << py.out;

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

}  // namespace
}  // namespace weft::e2e

// End to end, real processes: the `weft` CLI against a real scheduler and worker. What a
// user sees: status names and messages, exit status 2 for a bad command line or
// INVALID_ARGUMENT, 1 for other failures; the sampling, stopping, logprobs and chat flags
// reach the server (checked against the C++ client's results); --stop may be repeated
// and a value keeps its commas. Retries: a generate refused UNAVAILABLE (no replica yet)
// is made again until a worker attaches; one that streamed tokens before its scheduler
// went away is not.
#include <signal.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "tests/e2e/process_harness.h"

namespace weft::e2e {
namespace {

class CliE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new std::string(testing::FindModelFile());
    if (model_->empty()) return;
    cluster_ = new Cluster(*model_);
    ASSERT_TRUE(cluster_->StartScheduler().ok()) << cluster_->Logs();
    WorkerSpec w;
    w.num_kv_blocks = 96;
    w.threads = 2;
    ASSERT_TRUE(cluster_->StartWorker(w).ok()) << cluster_->Logs();
    ASSERT_TRUE(cluster_->WaitReplicas(1).ok()) << cluster_->Logs();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    delete model_;
  }
  void SetUp() override {
    if (model_->empty()) {
      GTEST_SKIP() << "default model not found (run tools/bootstrap.sh, or set WEFT_MODEL_DIR)";
    }
    ASSERT_NE(cluster_, nullptr);
  }

  // `weft` with `args`, --server set.
  static RunResult Weft(std::vector<std::string> args) {
    args.insert(args.begin(), Runfile("tools/cli/weft"));
    args.push_back("--server=" + cluster_->address());
    return RunToEnd(args, absl::Seconds(120));
  }
  static std::vector<int32_t> Ids(const std::string& out) {
    std::vector<int32_t> ids;
    for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
      int32_t id = 0;
      EXPECT_TRUE(absl::SimpleAtoi(line, &id)) << line;
      ids.push_back(id);
    }
    return ids;
  }

  static inline std::string* model_ = nullptr;
  static inline Cluster* cluster_ = nullptr;
};

TEST_F(CliE2eTest, ErrorsPrintStatusNamesAndExitByKind) {
  struct Case {
    std::vector<std::string> args;
    int code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"generate", "--prompt=x", "--top_p=2"}, 2, "weft: INVALID_ARGUMENT: sampling.top_p"},
      {{"generate", "--prompt=x", "--min_p=1.5"}, 2, "weft: INVALID_ARGUMENT: sampling.min_p"},
      {{"generate", "--prompt=x", "--model=nope"}, 1, "weft: NOT_FOUND: model 'nope'"},
      {{"generate"}, 2, "--prompt is required"},
      {{"generate", "--prompt=x", "--top_p=abc"}, 2, "--top_p=abc is not a number"},
      {{"generate", "--prompt=x", "--stop_token_ids=1,x"}, 2, "--stop_token_ids"},
      {{"generate", "--prompt=x", "--no_such_flag=1"}, 2, "unknown flag --no_such_flag"},
      {{"generate", "--prompt=x", "--n=zwei"}, 2, "bad value for --n"},
      {{"frobnicate"}, 2, "unknown command 'frobnicate'"},
      {{}, 2, "expected one command"},
      {{"health", "--service=nope"}, 1, "weft: NOT_FOUND"},
  };
  for (const Case& c : cases) {
    RunResult r = Weft(c.args);
    EXPECT_EQ(r.code, c.code) << absl::StrJoin(c.args, " ") << "\n" << r.log;
    EXPECT_TRUE(absl::StrContains(r.log, c.says)) << absl::StrJoin(c.args, " ") << "\n" << r.log;
    EXPECT_EQ(r.out, "") << "errors go to stderr";
  }
  RunResult h = Weft({"health", "--service=weft.v1.Generation"});
  EXPECT_EQ(h.code, 0) << h.log;
  EXPECT_EQ(h.out, "SERVING\n");
}

TEST_F(CliE2eTest, StopIsRepeatableAndKeepsCommas) {
  // One value of 300 bytes full of commas: sent whole, so the server refuses its length
  // (split at the commas it would have been many short strings).
  std::string long_stop;
  while (long_stop.size() < 300) long_stop += "a,b,";
  RunResult r = Weft({"generate", "--prompt=x", "--stop=" + long_stop});
  EXPECT_EQ(r.code, 2) << r.log;
  EXPECT_TRUE(absl::StrContains(r.log, "stopping.stop: stop string over 256 bytes")) << r.log;
  // 17 --stop flags all arrive (the cap is 16).
  std::vector<std::string> args = {"generate", "--prompt=x"};
  for (int i = 0; i < 17; ++i) args.push_back(absl::StrCat("--stop=s", i, ",t"));
  r = Weft(args);
  EXPECT_EQ(r.code, 2) << r.log;
  EXPECT_TRUE(absl::StrContains(r.log, "at most 16 strings")) << r.log;
  // Several good ones, with commas and given both ways, are accepted.
  r = Weft({"generate", "--prompt=Hello", "--max_tokens=3", "--stop=, and", "--stop", "x,y"});
  EXPECT_EQ(r.code, 0) << r.log;
}

TEST_F(CliE2eTest, SamplingStoppingLogprobsAndChatFlagsReachTheServer) {
  const std::string prompt = "The capital of France is";
  RunResult greedy = Weft({"generate", "--prompt=" + prompt, "--max_tokens=6", "--temperature=0",
                           "--ignore_eos", "--print_token_ids"});
  ASSERT_EQ(greedy.code, 0) << greedy.log;
  const std::vector<int32_t> ids = Ids(greedy.out);
  StreamResult cc = Generate(cluster_->stub(), GreedyRequest(prompt, 6));
  ASSERT_TRUE(cc.status.ok());
  EXPECT_EQ(ids, cc.token_ids);
  ASSERT_EQ(ids.size(), 6u);

  // A stop token id: the first generated token ends the sample (and is returned).
  RunResult stopped =
      Weft({"generate", "--prompt=" + prompt, "--max_tokens=6", "--temperature=0",
            "--print_token_ids", absl::StrCat("--stop_token_ids=99999999,", ids[0])});
  EXPECT_EQ(stopped.code, 2) << "an id outside the vocabulary is refused: " << stopped.log;
  stopped = Weft({"generate", "--prompt=" + prompt, "--max_tokens=6", "--temperature=0",
                  "--print_token_ids", absl::StrCat("--stop_token_ids=", ids[0])});
  ASSERT_EQ(stopped.code, 0) << stopped.log;
  EXPECT_EQ(Ids(stopped.out), std::vector<int32_t>{ids[0]});
  EXPECT_TRUE(absl::StrContains(stopped.log, "finished: FINISH_REASON_STOP")) << stopped.log;

  // Logprobs: one line per token on stderr, with the asked-for alternatives.
  RunResult lp = Weft({"generate", "--prompt=" + prompt, "--max_tokens=3", "--temperature=0",
                       "--ignore_eos", "--logprobs=2"});
  ASSERT_EQ(lp.code, 0) << lp.log;
  int lines = 0;
  for (absl::string_view line : absl::StrSplit(lp.log, '\n')) {
    if (!absl::StartsWith(line, "weft: sample 0 token ")) continue;
    ++lines;
    EXPECT_TRUE(absl::StrContains(line, " logprob ")) << line;
    EXPECT_EQ(std::count(line.begin(), line.end(), '|'), 2) << line;
  }
  EXPECT_EQ(lines, 3) << lp.log;

  // Penalties, min_p and a seed are accepted and change nothing about the count.
  RunResult pen = Weft({"generate", "--prompt=" + prompt, "--max_tokens=4", "--ignore_eos",
                        "--min_p=0.05", "--repetition_penalty=1.3", "--presence_penalty=0.5",
                        "--frequency_penalty=-0.5", "--seed=7", "--top_k=20", "--print_token_ids"});
  ASSERT_EQ(pen.code, 0) << pen.log;
  EXPECT_EQ(Ids(pen.out).size(), 4u);
  EXPECT_TRUE(absl::StrContains(pen.log, "seed 7")) << pen.log;

  // --system: a chat with a system and a user message, as the C++ client sends it.
  RunResult chat =
      Weft({"generate", "--system=You answer in one word.", "--prompt=Capital of France?",
            "--max_tokens=5", "--temperature=0", "--ignore_eos", "--print_token_ids"});
  ASSERT_EQ(chat.code, 0) << chat.log;
  weft::v1::GenerateRequest req = GreedyRequest("", 5);
  auto* m = req.mutable_chat()->add_messages();
  m->set_role("system");
  m->set_content("You answer in one word.");
  m = req.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("Capital of France?");
  StreamResult cchat = Generate(cluster_->stub(), req);
  ASSERT_TRUE(cchat.status.ok()) << cchat.status.error_message();
  EXPECT_EQ(Ids(chat.out), cchat.token_ids);
}

// The CLI started in the background (its own process), --server at `cluster`.
std::unique_ptr<ChildProcess> StartWeft(const Cluster& cluster, std::vector<std::string> args,
                                        const std::string& name) {
  args.insert(args.begin(), Runfile("tools/cli/weft"));
  args.push_back("--server=" + cluster.address());
  auto child = ChildProcess::Start(args, cluster.dir() + "/" + name + ".log",
                                   cluster.dir() + "/" + name + ".out");
  EXPECT_TRUE(child.ok()) << child.status();
  return child.ok() ? std::move(*child) : nullptr;
}

TEST(CliRetryE2eTest, UnavailableIsRetriedUntilAReplicaAttaches) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler().ok()) << cluster.Logs();
  // No worker yet: the scheduler answers UNAVAILABLE; the CLI keeps asking.
  auto cli = StartWeft(cluster,
                       {"generate", "--prompt=The capital of France is", "--max_tokens=4",
                        "--temperature=0", "--ignore_eos", "--max_attempts=100000",
                        "--retry_initial_backoff_s=0.05", "--retry_max_backoff_s=0.2",
                        "--timeout_s=300"},
                       "cli-retry");
  ASSERT_NE(cli, nullptr);
  const std::string refused = "weft_requests_status_total{code=\"UNAVAILABLE\"}";
  ASSERT_TRUE(WaitFor([&] { return cluster.Metric(refused) >= 2; }, absl::Seconds(60)))
      << cli->LogTail() << cluster.Logs();
  EXPECT_TRUE(cli->Running()) << cli->LogTail();
  WorkerSpec w;
  w.num_kv_blocks = 64;
  ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  ASSERT_TRUE(cli->Wait(absl::Seconds(180)).has_value()) << "the CLI never finished";
  EXPECT_EQ(cli->exit_code(), 0) << cli->LogTail();
  EXPECT_TRUE(absl::StrContains(cli->LogTail(), "retrying in")) << cli->LogTail();
  EXPECT_TRUE(absl::StrContains(cli->LogTail(), "completion 4")) << cli->LogTail();
  EXPECT_FALSE(ReadFile(cluster.dir() + "/cli-retry.out").empty());
  EXPECT_EQ(cluster.Metric("weft_requests_status_total{code=\"OK\"}"), 1);
}

TEST(CliRetryE2eTest, NoRetryOnceTokensWereStreamed) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler({"--drain_timeout_s=1"}).ok()) << cluster.Logs();
  WorkerSpec w;
  w.num_kv_blocks = 256;
  ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();
  auto cli = StartWeft(cluster,
                       {"generate", "--prompt=Once upon a time", "--max_tokens=3000",
                        "--temperature=0", "--ignore_eos", "--max_attempts=100",
                        "--retry_initial_backoff_s=0.05", "--timeout_s=300"},
                       "cli-stream");
  ASSERT_NE(cli, nullptr);
  const std::string out = cluster.dir() + "/cli-stream.out";
  ASSERT_TRUE(WaitFor([&] { return !ReadFile(out).empty(); }, absl::Seconds(120)))
      << cli->LogTail() << cluster.Logs();
  // The scheduler drains for 1 s and ends the stream UNAVAILABLE, then exits: the call
  // had streamed tokens, so the CLI reports it instead of asking again.
  ASSERT_TRUE(cluster.scheduler()->Signal(SIGTERM));
  ASSERT_TRUE(cli->Wait(absl::Seconds(120)).has_value()) << "the CLI never finished";
  EXPECT_EQ(cli->exit_code(), 1) << cli->LogTail();
  EXPECT_TRUE(absl::StrContains(cli->LogTail(), "weft: UNAVAILABLE")) << cli->LogTail();
  EXPECT_FALSE(absl::StrContains(cli->LogTail(), "retrying")) << cli->LogTail();
}

}  // namespace
}  // namespace weft::e2e

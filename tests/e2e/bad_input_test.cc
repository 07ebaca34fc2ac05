// End to end, real processes: RELIABILITY.md's bad-input matrix, status by status, over
// real gRPC against weft-scheduler with a real worker attached. Rejected requests never
// reach the scheduler core: no prompt token is admitted and no KV block is allocated
// (read from /metrics). The draining row is in drain_test.cc.
#include <signal.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "tests/e2e/process_harness.h"

namespace weft::e2e {
namespace {

using weft::v1::GenerateRequest;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// One scheduler + one worker for the whole suite; tests that need other scheduler flags
// restart the scheduler on the same worker port and the worker re-attaches by itself.
class BadInputE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new std::string(testing::FindModelFile());
    if (model_->empty()) return;
    cluster_ = new Cluster(*model_);
    ASSERT_TRUE(cluster_->StartScheduler(kBaseFlags).ok()) << cluster_->Logs();
    WorkerSpec w;
    w.num_kv_blocks = 160;
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
    if (model_->empty()) GTEST_SKIP() << "default model not found (run tools/bootstrap.sh, or set WEFT_MODEL_DIR)";
    ASSERT_NE(cluster_, nullptr);
  }

  // SIGTERM the scheduler (exit 0 expected), start one with `flags` where the worker
  // dials, and wait for the worker to be admitted again.
  static void RestartScheduler(std::vector<std::string> flags) {
    ASSERT_TRUE(cluster_->scheduler()->Signal(SIGTERM));
    ASSERT_TRUE(cluster_->scheduler()->Wait(absl::Seconds(30)).has_value()) << cluster_->Logs();
    ASSERT_EQ(cluster_->scheduler()->exit_code(), 0) << cluster_->Logs();
    flags.insert(flags.begin(), kBaseFlags.begin(), kBaseFlags.end());
    ASSERT_TRUE(cluster_->StartScheduler(flags, cluster_->worker_port()).ok()) << cluster_->Logs();
    ASSERT_TRUE(cluster_->WaitReplicas(1).ok()) << cluster_->Logs();
  }

  static weft::v1::ModelInfo Info() {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    weft::v1::ListModelsResponse resp;
    grpc::Status s = cluster_->stub()->ListModels(&ctx, {}, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.models_size() > 0 ? resp.models(0) : weft::v1::ModelInfo();
  }

  static inline const std::vector<std::string> kBaseFlags = {"--drain_timeout_s=5"};
  // Tests that pause the worker (ScopedPause) to hold a request running: its step is not
  // overdue however long the pause (the scheduler would fence the replica after 10 s).
  static inline const std::string kNoStepDeadline = "--step_deadline_floor_s=600";
  static inline std::string* model_ = nullptr;
  static inline Cluster* cluster_ = nullptr;
};

// The scheduler alone (no worker yet): UNAVAILABLE, health NOT_SERVING, ListModels
// answers with zero replicas.
TEST_F(BadInputE2eTest, NoReplicaIsUnavailable) {
  Cluster alone(*model_);
  ASSERT_TRUE(alone.StartScheduler().ok()) << alone.Logs();
  EXPECT_EQ(alone.Health(), "NOT_SERVING");
  StreamResult r = Generate(alone.stub(), GreedyRequest("Hello", 4), absl::Seconds(30));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
  EXPECT_EQ(r.num_messages, 0);
  EXPECT_EQ(alone.Metric("weft_replicas"), 0);
  EXPECT_EQ(alone.Metric("weft_kv_blocks_used"), 0);
  EXPECT_EQ(alone.Metric("weft_prompt_tokens_total"), 0);
}

struct Row {
  std::string name;
  std::function<void(GenerateRequest*)> mutate;
  grpc::StatusCode code;
};

TEST_F(BadInputE2eTest, EveryBadInputGetsItsStatusAndNoBlock) {
  const weft::v1::ModelInfo info = Info();
  ASSERT_GT(info.vocab_size(), 0);
  ASSERT_GT(info.context_length(), 0);
  const int vocab = info.vocab_size();
  const int context = info.context_length();
  auto ids = [](int n, int id) {
    weft::v1::TokenIds t;
    for (int i = 0; i < n; ++i) t.add_ids(id);
    return t;
  };
  const auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
  const std::vector<Row> rows = {
      {"empty text prompt", [](GenerateRequest* r) { r->set_text(""); }, kInvalid},
      {"no prompt at all", [](GenerateRequest* r) { r->clear_prompt(); }, kInvalid},
      {"empty token ids", [](GenerateRequest* r) { r->mutable_token_ids(); }, kInvalid},
      {"chat without messages", [](GenerateRequest* r) { r->mutable_chat(); }, kInvalid},
      {"chat with an unknown role",
       [](GenerateRequest* r) {
         auto* m = r->mutable_chat()->add_messages();
         m->set_role("wizard");
         m->set_content("hi");
       },
       kInvalid},
      {"prompt as long as the context",
       [&](GenerateRequest* r) {
         *r->mutable_token_ids() = ids(context, 42);
         r->mutable_stopping()->clear_max_tokens();
       },
       kInvalid},
      {"prompt + max_tokens over the context",
       [&](GenerateRequest* r) {
         *r->mutable_token_ids() = ids(context - 10, 42);
         r->mutable_stopping()->set_max_tokens(20);
       },
       kInvalid},
      {"max_tokens 0", [](GenerateRequest* r) { r->mutable_stopping()->set_max_tokens(0); }, kInvalid},
      {"max_tokens negative", [](GenerateRequest* r) { r->mutable_stopping()->set_max_tokens(-5); }, kInvalid},
      {"max_tokens over the server cap",
       [](GenerateRequest* r) { r->mutable_stopping()->set_max_tokens(4097); }, kInvalid},
      {"n 0", [](GenerateRequest* r) { r->set_n(0); }, kInvalid},
      {"n over its cap", [](GenerateRequest* r) { r->set_n(17); }, kInvalid},
      {"logprobs over its cap", [](GenerateRequest* r) { r->set_logprobs(21); }, kInvalid},
      {"logprobs negative", [](GenerateRequest* r) { r->set_logprobs(-1); }, kInvalid},
      {"temperature < 0", [](GenerateRequest* r) { r->mutable_sampling()->set_temperature(-0.5f); }, kInvalid},
      {"temperature NaN", [](GenerateRequest* r) { r->mutable_sampling()->set_temperature(kNaN); }, kInvalid},
      {"temperature inf", [](GenerateRequest* r) { r->mutable_sampling()->set_temperature(kInf); }, kInvalid},
      {"top_p 0", [](GenerateRequest* r) { r->mutable_sampling()->set_top_p(0); }, kInvalid},
      {"top_p > 1", [](GenerateRequest* r) { r->mutable_sampling()->set_top_p(1.5f); }, kInvalid},
      {"top_p NaN", [](GenerateRequest* r) { r->mutable_sampling()->set_top_p(kNaN); }, kInvalid},
      {"top_k < 0", [](GenerateRequest* r) { r->mutable_sampling()->set_top_k(-1); }, kInvalid},
      {"min_p < 0", [](GenerateRequest* r) { r->mutable_sampling()->set_min_p(-0.1f); }, kInvalid},
      {"min_p > 1", [](GenerateRequest* r) { r->mutable_sampling()->set_min_p(1.1f); }, kInvalid},
      {"repetition_penalty 0",
       [](GenerateRequest* r) { r->mutable_sampling()->set_repetition_penalty(0); }, kInvalid},
      {"repetition_penalty inf",
       [](GenerateRequest* r) { r->mutable_sampling()->set_repetition_penalty(kInf); }, kInvalid},
      {"presence_penalty > 2",
       [](GenerateRequest* r) { r->mutable_sampling()->set_presence_penalty(2.5f); }, kInvalid},
      {"frequency_penalty < -2",
       [](GenerateRequest* r) { r->mutable_sampling()->set_frequency_penalty(-2.5f); }, kInvalid},
      {"frequency_penalty NaN",
       [](GenerateRequest* r) { r->mutable_sampling()->set_frequency_penalty(kNaN); }, kInvalid},
      {"token id == vocabulary size",
       [&](GenerateRequest* r) {
         *r->mutable_token_ids() = ids(3, 1);
         r->mutable_token_ids()->add_ids(vocab);
       },
       kInvalid},
      {"negative token id", [&](GenerateRequest* r) { *r->mutable_token_ids() = ids(2, -7); }, kInvalid},
      {"too many stop strings",
       [](GenerateRequest* r) {
         for (int i = 0; i < 17; ++i) r->mutable_stopping()->add_stop(absl::StrCat("s", i));
       },
       kInvalid},
      {"stop string too long",
       [](GenerateRequest* r) { r->mutable_stopping()->add_stop(std::string(257, 'x')); }, kInvalid},
      {"empty stop string", [](GenerateRequest* r) { r->mutable_stopping()->add_stop(""); }, kInvalid},
      {"stop token id over the vocabulary",
       [&](GenerateRequest* r) { r->mutable_stopping()->add_stop_token_ids(vocab + 5); }, kInvalid},
      {"text that is not UTF-8 (the request does not parse)",
       [](GenerateRequest* r) { r->set_text(std::string("caf\xe9", 4)); }, kInvalid},
      {"a chat message that is not UTF-8",
       [](GenerateRequest* r) {
         auto* m = r->mutable_chat()->add_messages();
         m->set_role("user");
         m->set_content(std::string("\xff\xfe", 2));
       },
       kInvalid},
      {"unknown model name", [](GenerateRequest* r) { r->set_model("no-such-model"); },
       grpc::StatusCode::NOT_FOUND},
      {"message over the receive limit (5 MiB prompt)",
       [](GenerateRequest* r) { r->set_text(std::string(5 << 20, 'a')); },
       grpc::StatusCode::RESOURCE_EXHAUSTED},
  };

  auto before = cluster_->Metrics();
  ASSERT_TRUE(before.ok()) << before.status();
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    GenerateRequest req = GreedyRequest("The capital of France is", 4);
    row.mutate(&req);
    StreamResult r = Generate(cluster_->stub(), req, absl::Seconds(30));
    EXPECT_EQ(CodeName(r.status.error_code()), CodeName(row.code)) << r.status.error_message();
    EXPECT_FALSE(r.status.error_message().empty());
    EXPECT_EQ(r.num_messages, 0) << "a rejected call streamed responses";
    EXPECT_EQ(cluster_->Metric("weft_kv_blocks_used"), 0);
  }
  // Nothing reached the core: no prompt token admitted, no block, no request queued.
  auto after = cluster_->Metrics();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->Get("weft_prompt_tokens_total"), before->Get("weft_prompt_tokens_total"));
  EXPECT_EQ(after->Get("weft_kv_blocks_used"), 0);
  EXPECT_EQ(after->Get("weft_requests_waiting"), 0);
  EXPECT_EQ(after->Get("weft_requests_running"), 0);
  EXPECT_EQ(after->Sum("weft_steps_total"), before->Sum("weft_steps_total"));
  // The server counted the rejections by status (the over-size message is refused by
  // gRPC itself before the service sees it).
  EXPECT_EQ(after->Get("weft_requests_status_total{code=\"INVALID_ARGUMENT\"}") -
                before->Get("weft_requests_status_total{code=\"INVALID_ARGUMENT\"}"),
            rows.size() - 2);
  EXPECT_EQ(after->Get("weft_requests_status_total{code=\"NOT_FOUND\"}") -
                before->Get("weft_requests_status_total{code=\"NOT_FOUND\"}"),
            1);

  // And the server still serves a good request afterwards.
  StreamResult ok = Generate(cluster_->stub(), GreedyRequest("The capital of France is", 4));
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.token_ids.size(), 4u);
}

// The model named by x-weft-model metadata (what proxies route by) and a request that
// does not parse: statuses with messages that say what is wrong.
TEST_F(BadInputE2eTest, ModelMetadataAndRequestsThatDoNotParse) {
  const std::string served = Info().name();
  ASSERT_FALSE(served.empty());
  auto call = [&](const std::string& field, const std::string& header) {
    GenerateRequest req = GreedyRequest("The capital of France is", 2);
    req.set_model(field);
    grpc::ClientContext ctx;
    if (!header.empty()) ctx.AddMetadata("x-weft-model", header);
    return Generate(cluster_->stub(), req, absl::Seconds(30), {}, &ctx);
  };
  EXPECT_TRUE(call("", served).status.ok());  // the metadata alone selects the model
  EXPECT_TRUE(call(served, served).status.ok());
  StreamResult r = call(served, "other-model");
  EXPECT_EQ(CodeName(r.status.error_code()), "INVALID_ARGUMENT");
  EXPECT_NE(r.status.error_message().find("x-weft-model"), std::string::npos) << r.status.error_message();
  r = call("", "other-model");
  EXPECT_EQ(CodeName(r.status.error_code()), "NOT_FOUND");
  EXPECT_NE(r.status.error_message().find("other-model"), std::string::npos) << r.status.error_message();

  GenerateRequest bad = GreedyRequest("x", 2);
  bad.mutable_stopping()->add_stop(std::string("\xc3\x28", 2));
  r = Generate(cluster_->stub(), bad, absl::Seconds(30));
  EXPECT_EQ(CodeName(r.status.error_code()), "INVALID_ARGUMENT");
  EXPECT_NE(r.status.error_message().find("stopping.stop[0]: not valid UTF-8"), std::string::npos)
      << r.status.error_message();
}

// Admission queue full: one request runs (max_num_seqs=1), one waits (max_waiting=1);
// the next is RESOURCE_EXHAUSTED at once, while the others are still going.
TEST_F(BadInputE2eTest, AdmissionQueueFullIsResourceExhaustedAtOnce) {
  RestartScheduler({"--max_num_seqs=1", "--max_waiting=1", kNoStepDeadline});
  BackgroundStream running(cluster_->stub(), GreedyRequest("Once upon a time", 600));
  ASSERT_TRUE(running.WaitTokens(1)) << cluster_->Logs();
  // The worker paused: the runner cannot finish, however fast this machine is.
  ScopedPause pause(cluster_->worker("r0"));
  ASSERT_TRUE(pause.paused()) << cluster_->Logs();
  BackgroundStream waiting(cluster_->stub(), GreedyRequest("The capital of France is", 8));
  ASSERT_TRUE(WaitFor([] { return cluster_->Metric("weft_requests_waiting") == 1; }, absl::Seconds(30)));
  const double blocks = cluster_->Metric("weft_kv_blocks_used");
  const double prompt_tokens = cluster_->Metric("weft_prompt_tokens_total");

  StreamResult r = Generate(cluster_->stub(), GreedyRequest("Hello there", 8), absl::Seconds(30));
  EXPECT_EQ(CodeName(r.status.error_code()), "RESOURCE_EXHAUSTED") << r.status.error_message();
  EXPECT_EQ(r.num_messages, 0);
  EXPECT_FALSE(running.done()) << "the rejection waited for the running request";
  EXPECT_EQ(waiting.num_tokens(), 0);
  EXPECT_EQ(cluster_->Metric("weft_requests_waiting"), 1);
  EXPECT_EQ(cluster_->Metric("weft_prompt_tokens_total"), prompt_tokens);
  EXPECT_LE(cluster_->Metric("weft_kv_blocks_used"), blocks + 1)  // the runner may cross a block
      << "the rejected request got blocks";

  pause.Resume();
  running.Cancel();
  EXPECT_EQ(running.Join().status.error_code(), grpc::StatusCode::CANCELLED);
  StreamResult w = waiting.Join();
  EXPECT_TRUE(w.status.ok()) << w.status.error_message();
  EXPECT_EQ(w.token_ids.size(), 8u);
  EXPECT_TRUE(WaitFor([] { return cluster_->Metric("weft_kv_blocks_used") == 0; }, absl::Seconds(30)));
}

// Too many open streams (max_streams=2): the third call is RESOURCE_EXHAUSTED at once.
TEST_F(BadInputE2eTest, TooManyStreamsIsResourceExhaustedAtOnce) {
  RestartScheduler({"--max_streams=2", kNoStepDeadline});
  BackgroundStream a(cluster_->stub(), GreedyRequest("Once upon a time", 600));
  BackgroundStream b(cluster_->stub(), GreedyRequest("The capital of France is", 600));
  ASSERT_TRUE(a.WaitTokens(1)) << cluster_->Logs();
  ASSERT_TRUE(b.WaitTokens(1)) << cluster_->Logs();
  // The worker paused: neither stream can finish, however fast this machine is.
  ScopedPause pause(cluster_->worker("r0"));
  ASSERT_TRUE(pause.paused()) << cluster_->Logs();
  const double prompt_tokens = cluster_->Metric("weft_prompt_tokens_total");

  StreamResult r = Generate(cluster_->stub(), GreedyRequest("Hello there", 8), absl::Seconds(30));
  EXPECT_EQ(CodeName(r.status.error_code()), "RESOURCE_EXHAUSTED") << r.status.error_message();
  EXPECT_NE(r.status.error_message().find("streams"), std::string::npos) << r.status.error_message();
  EXPECT_EQ(r.num_messages, 0);
  EXPECT_FALSE(a.done());
  EXPECT_FALSE(b.done());
  EXPECT_EQ(cluster_->Metric("weft_prompt_tokens_total"), prompt_tokens);

  pause.Resume();
  a.Cancel();
  b.Cancel();
  a.Join();
  b.Join();
  // Once a slot is free again, calls are accepted.
  ASSERT_TRUE(WaitFor([] { return cluster_->Metric("weft_streams_open") == 0; }, absl::Seconds(30)));
  StreamResult ok = Generate(cluster_->stub(), GreedyRequest("Hello there", 4));
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_TRUE(WaitFor([] { return cluster_->Metric("weft_kv_blocks_used") == 0; }, absl::Seconds(30)));
}

// Client deadline passed, while queued (behind a max_num_seqs=1 runner) and while
// running: DEADLINE_EXCEEDED, and the blocks are freed.
TEST_F(BadInputE2eTest, DeadlinePassedQueuedOrRunningFreesBlocks) {
  RestartScheduler({"--max_num_seqs=1", kNoStepDeadline});
  {
    BackgroundStream running(cluster_->stub(), GreedyRequest("Once upon a time", 600));
    ASSERT_TRUE(running.WaitTokens(1)) << cluster_->Logs();
    // The worker paused: the runner holds the only slot until the queued call's deadline
    // has passed, however fast this machine is.
    ScopedPause pause(cluster_->worker("r0"));
    ASSERT_TRUE(pause.paused()) << cluster_->Logs();
    StreamResult queued =
        Generate(cluster_->stub(), GreedyRequest("The capital of France is", 8), absl::Seconds(1));
    EXPECT_EQ(CodeName(queued.status.error_code()), "DEADLINE_EXCEEDED");
    EXPECT_EQ(queued.token_ids.size(), 0u);
    EXPECT_FALSE(running.done());
    // The expired request left the queue.
    EXPECT_TRUE(WaitFor([] { return cluster_->Metric("weft_requests_waiting") == 0; }, absl::Seconds(30)));
    pause.Resume();
    running.Cancel();
    running.Join();
  }
  EXPECT_TRUE(WaitFor([] { return cluster_->Metric("weft_kv_blocks_used") == 0; }, absl::Seconds(30)));

  // Running: tokens flow, then the deadline passes mid-generation. The worker is paused
  // at the first token, so the generation cannot finish first on a fast machine; the
  // pause stays under the scheduler's keepalive timeout (10 s).
  int got = 0;
  std::optional<ScopedPause> pause;
  StreamResult running = Generate(
      cluster_->stub(), GreedyRequest("Once upon a time", 2000), absl::Seconds(6),
      [&](const weft::v1::GenerateResponse& r) {
        got += r.token_ids_size();
        if (got > 0 && !pause.has_value()) pause.emplace(cluster_->worker("r0"));
        return true;
      });
  ASSERT_TRUE(pause.has_value()) << "the request never ran (no token in 6 s)\n" << cluster_->Logs();
  EXPECT_TRUE(pause->paused());
  pause.reset();  // resumed
  EXPECT_EQ(CodeName(running.status.error_code()), "DEADLINE_EXCEEDED");
  EXPECT_GT(got, 0);
  EXPECT_TRUE(WaitFor([] { return cluster_->Metric("weft_kv_blocks_used") == 0; }, absl::Seconds(30)))
      << "blocks used " << cluster_->Metric("weft_kv_blocks_used");
  EXPECT_TRUE(WaitFor([] { return cluster_->Metric("weft_requests_running") == 0; }, absl::Seconds(30)));
}

}  // namespace
}  // namespace weft::e2e

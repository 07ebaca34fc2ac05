// The engine end to end on loopback with fake workers: real gRPC services, real
// WorkerClients and real plan application (StateCache); only the model is fake (tokens
// are a function of seed, sample and position, so expected outputs are known).
#include "scheduler/service/engine.h"

#include <atomic>
#include <optional>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "common/protocol_version.h"
#include "common/shard_layout.h"
#include "common/testing/status_matchers.h"
#include "scheduler/edge/generate_frontend.h"
#include "scheduler/edge/generation_service.h"
#include "scheduler/service/worker_control_service.h"
#include "common/plan/state_cache.h"
#include "worker/service/worker_client.h"

namespace weft {
namespace {

using ::weft::testing::StatusIs;

constexpr int32_t kVocab = 64;
constexpr int32_t kEos = 63;

class FakeText : public TokenTextSource {
 public:
  FakeText() {
    for (int i = 0; i < kVocab; ++i) pieces_.push_back(absl::StrCat("t", i, " "));
    pieces_[kEos] = "";
  }
  absl::string_view TokenBytes(int32_t id) const override { return pieces_[id]; }
  absl::string_view DisplayBytes(int32_t id) const override {
    if (id == kEos) return "<eos>";
    return pieces_[id];
  }

 private:
  std::vector<std::string> pieces_;
};

class IdEncoder : public PromptEncoder {
 public:
  absl::StatusOr<std::vector<int32_t>> EncodeText(const std::string& text) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c % 60);
    return ids;
  }
  absl::StatusOr<std::vector<int32_t>> EncodeChat(const weft::v1::ChatPrompt&) const override {
    return absl::UnimplementedError("no chat");
  }
};

// Token i of sample j: never EOS, deterministic.
int32_t FakeToken(uint64_t seed, int32_t sample, int32_t i) {
  return static_cast<int32_t>((seed * 31 + sample * 7 + i * 3) % 60);
}

class FakeExecutor : public StepExecutor {
 public:
  FakeExecutor(std::string replica, int rank, int world, std::string fingerprint = "fp")
      : replica_(std::move(replica)), rank_(rank), world_(world), fp_(std::move(fingerprint)) {}

  weft::v1::WorkerHello Hello() override {
    weft::v1::WorkerHello h;
    h.set_model_fingerprint(fp_);
    h.set_replica(replica_);
    h.set_rank(rank_);
    h.set_world_size(world_);
    h.set_block_size(4);
    h.set_num_kv_blocks(blocks_);
    h.set_backend("fake");
    h.set_vocab_size(kVocab);
    h.set_shard_layout(ComputeShardLayout(4, 2, 64, kVocab, world_, rank_)->ToString());
    return h;
  }
  absl::Status OnWelcome(const weft::v1::Welcome& w) override {
    cache_ = std::make_unique<StateCache>(4, w.num_kv_blocks(), kVocab);
    cache_->Reset(w.first_step_id());
    return absl::OkStatus();
  }
  weft::v1::StepResult Execute(const weft::v1::StepPlan& plan) override {
    ++executed;
    {
      MutexLock l(&hang_mu_);
      hung_in_step = hang_;
      while (hang_) hang_cv_.Wait(&hang_mu_);
      hung_in_step = false;
    }
    weft::v1::StepResult r;
    r.set_step_id(plan.step_id());
    r.set_rank(rank_);
    if (fail_next_.exchange(false)) {
      cache_->Fail(plan);
      r.set_error("injected failure");
      return r;
    }
    StepBatch batch;
    absl::Status s = cache_->Apply(plan, &batch);
    if (!s.ok()) {
      cache_->Fail(plan);
      r.set_error(std::string(s.message()));
      return r;
    }
    for (ScheduledSequence& sc : batch.sequences) {
      if (!sc.sample) continue;
      WorkerSequence* st = sc.state;
      int32_t tok = FakeToken(st->sampling.seed, st->sample_index, st->num_output_tokens);
      if (rank_ == 1 && disagree_.load()) tok = (tok + 1) % 60;
      auto* t = r.add_tokens();
      t->set_seq_id(st->seq_id);
      t->set_token_id(tok);
      if (st->sampling.num_logprobs >= 0) {  // a certain token: log-probability exactly 0
        t->set_logprob(0.0f);
        for (int k = 0; k < st->sampling.num_logprobs; ++k) {
          auto* e = t->add_top();
          e->set_token_id(k == 0 ? tok : kEos);
          e->set_logprob(k == 0 ? 0.0f : -30.0f);
        }
      }
      cache_->AppendSampled(st, tok);
    }
    r.set_tokens_hash(TokensHash(r));
    absl::SleepFor(absl::Milliseconds(step_ms_));
    return r;
  }
  void OnDetach() override { ++detaches; }

  // A hung worker: steps block until Hang(false).
  void Hang(bool hang) {
    MutexLock l(&hang_mu_);
    hang_ = hang;
    hang_cv_.SignalAll();
  }

  int32_t blocks_ = 256;
  int step_ms_ = 1;  // the forward pass's time
  std::atomic<bool> fail_next_{false}, disagree_{false};
  std::atomic<int> detaches{0};
  std::atomic<int> executed{0};  // plans received
  std::atomic<bool> hung_in_step{false};  // a step waits for Hang(false)

 private:
  std::string replica_;
  int rank_, world_;
  std::string fp_;
  std::unique_ptr<StateCache> cache_;
  Mutex hang_mu_;
  CondVar hang_cv_;
  bool hang_ ABSL_GUARDED_BY(hang_mu_) = false;
};

struct Worker {
  std::unique_ptr<FakeExecutor> exec;
  std::unique_ptr<WorkerClient> client;
  std::thread thread;
  absl::Status result;
  void Start(const std::string& addr) {
    WorkerClientOptions o;
    o.scheduler_address = addr;
    o.initial_backoff = absl::Milliseconds(20);
    client = std::make_unique<WorkerClient>(o, exec.get());
    thread = std::thread([this] { result = client->Run(); });
  }
  void Stop() {
    if (client) client->Stop();
    if (thread.joinable()) thread.join();
  }
};

class EngineTest : public ::testing::Test {
 protected:
  void StartServer(absl::Duration deadline_floor = absl::Seconds(10),
                   const std::function<void(EngineOptions*)>& tweak = {}) {
    EngineOptions eo;
    eo.core.block_size = 4;
    eo.core.limits.max_model_len = 256;
    eo.core.limits.vocab_size = kVocab;
    eo.core.eos_token_ids = {kEos};
    eo.core.max_num_batched_tokens = 64;
    eo.step_deadline.floor = deadline_floor;
    eo.stall_timeout = absl::Seconds(1);
    if (tweak) tweak(&eo);
    ExpectedModel em;
    em.fingerprint = "fp";
    em.block_size = 4;
    em.vocab_size = kVocab;
    em.n_head = 4;
    em.n_head_kv = 2;
    em.n_ff = 64;
    weft::v1::ModelInfo info;
    info.set_name("fake");
    engine_ = std::make_unique<Engine>(eo, em, info, &text_, &metrics_, nullptr);
    ASSERT_TRUE(engine_->Start().ok());
    RequestLimits lim;
    lim.vocab_size = kVocab;
    lim.max_model_len = 256;
    FrontendOptions fo;
    fo.model_name = "fake";
    frontend_ = std::make_unique<GenerateFrontend>(fo, lim, &encoder_,
                                                   engine_.get(), &metrics_);
    gen_ = std::make_unique<GenerationService>(frontend_.get());
    ctl_ = std::make_unique<WorkerControlService>(engine_.get());
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(gen_.get());
    b.RegisterService(ctl_.get());
    server_ = b.BuildAndStart();
    addr_ = "127.0.0.1:" + std::to_string(port_);
    stub_ = weft::v1::Generation::NewStub(grpc::CreateChannel(addr_, grpc::InsecureChannelCredentials()));
  }
  Worker* AddWorker(const std::string& replica, int rank = 0, int world = 1,
                    const std::string& fp = "fp") {
    auto w = std::make_unique<Worker>();
    w->exec = std::make_unique<FakeExecutor>(replica, rank, world, fp);
    w->Start(addr_);
    workers_.push_back(std::move(w));
    return workers_.back().get();
  }
  // Waits for the engine's state (its metrics, replicas, and what its steps cause),
  // re-checked after each iteration of its loop; false after a 30 s hang guard.
  bool Eventually(const std::function<bool()>& pred) {
    return engine_->WaitUntil(pred, absl::Now() + absl::Seconds(30));
  }
  bool WaitReplicas(int n) { return Eventually([&] { return engine_->num_replicas() == n; }); }
  void TearDown() override {
    for (auto& w : workers_) w->Stop();
    if (engine_) engine_->Stop();
    if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  }

  struct Outcome {
    grpc::Status status;
    std::vector<int32_t> tokens;
    std::string text;
    weft::v1::FinishReason reason = weft::v1::FINISH_REASON_UNSPECIFIED;
    weft::v1::Usage usage;
    std::vector<weft::v1::Logprobs> logprobs;
    int messages = 0;
  };
  static weft::v1::GenerateRequest Request(int max_tokens, uint64_t seed,
                                           const std::string& prompt = "hello") {
    weft::v1::GenerateRequest req;
    req.set_text(prompt);
    req.mutable_stopping()->set_max_tokens(max_tokens);
    req.mutable_sampling()->set_seed(seed);
    return req;
  }
  Outcome Generate(int max_tokens, uint64_t seed, const std::string& prompt = "hello",
                   grpc::ClientContext* ctx = nullptr, int stop_after = -1) {
    return Generate(Request(max_tokens, seed, prompt), ctx, stop_after);
  }
  Outcome Generate(const weft::v1::GenerateRequest& req, grpc::ClientContext* ctx = nullptr,
                   int stop_after = -1) {
    grpc::ClientContext local;
    if (ctx == nullptr) ctx = &local;
    auto reader = stub_->Generate(ctx, req);
    Outcome o;
    weft::v1::GenerateResponse r;
    while (reader->Read(&r)) {
      ++o.messages;
      o.tokens.insert(o.tokens.end(), r.token_ids().begin(), r.token_ids().end());
      o.text += r.text();
      if (r.finish_reason() != weft::v1::FINISH_REASON_UNSPECIFIED) o.reason = r.finish_reason();
      if (r.has_usage()) o.usage = r.usage();
      o.logprobs.insert(o.logprobs.end(), r.logprobs().begin(), r.logprobs().end());
      if (stop_after >= 0 && static_cast<int>(o.tokens.size()) >= stop_after) ctx->TryCancel();
    }
    o.status = reader->Finish();
    return o;
  }
  static std::vector<int32_t> Expected(uint64_t seed, int n) {
    std::vector<int32_t> v;
    for (int i = 0; i < n; ++i) v.push_back(FakeToken(seed, 0, i));
    return v;
  }
  double BlocksUsed() { return metrics_.kv_blocks_used.Value(); }
  double Steps(const std::string& replica) { return metrics_.Steps(replica).Value(); }
  bool WaitBlocksFree() { return Eventually([&] { return BlocksUsed() == 0; }); }

  FakeText text_;
  IdEncoder encoder_;
  ServiceMetrics metrics_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<GenerateFrontend> frontend_;
  std::unique_ptr<GenerationService> gen_;
  std::unique_ptr<WorkerControlService> ctl_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string addr_;
  std::unique_ptr<weft::v1::Generation::Stub> stub_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

TEST_F(EngineTest, NoReplicaIsUnavailable) {
  StartServer();
  EXPECT_EQ(Generate(4, 1).status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(EngineTest, StreamsTokensTextAndUsage) {
  StartServer();
  AddWorker("r0");
  ASSERT_TRUE(WaitReplicas(1));
  Outcome o = Generate(10, 5);
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_EQ(o.tokens, Expected(5, 10));
  EXPECT_EQ(o.reason, weft::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(o.usage.prompt_tokens(), 5);
  EXPECT_EQ(o.usage.completion_tokens(), 10);
  std::string text;
  for (int32_t t : o.tokens) text += absl::StrCat("t", t, " ");
  EXPECT_EQ(o.text, text);
  EXPECT_TRUE(WaitBlocksFree());
}

// A token's log-probability of exactly 0 (a certain token) is still reported: the
// engine once took "logprob 0 and no top list" to mean "no logprobs asked for".
TEST_F(EngineTest, LogprobOfExactlyZeroIsReturned) {
  StartServer();
  AddWorker("r0");
  ASSERT_TRUE(WaitReplicas(1));
  weft::v1::GenerateRequest req = Request(6, 5);
  req.set_logprobs(0);
  Outcome o = Generate(req);
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  ASSERT_EQ(o.tokens.size(), 6u);
  ASSERT_EQ(o.logprobs.size(), 6u) << "one entry per token";
  for (const auto& lp : o.logprobs) EXPECT_EQ(lp.logprob(), 0.0f);
  EXPECT_TRUE(Generate(Request(6, 5)).logprobs.empty()) << "none asked for";
}

// A special token in a top list is named by its text, not by the "" it renders as.
TEST_F(EngineTest, SpecialTokensInLogprobsCarryTheirText) {
  StartServer();
  AddWorker("r0");
  ASSERT_TRUE(WaitReplicas(1));
  weft::v1::GenerateRequest req = Request(3, 5);
  req.set_logprobs(2);
  Outcome o = Generate(req);
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  ASSERT_EQ(o.logprobs.size(), 3u);
  for (const auto& lp : o.logprobs) {
    ASSERT_EQ(lp.top_size(), 2);
    EXPECT_EQ(lp.top(1).token_id(), kEos);
    EXPECT_EQ(lp.top(1).token_bytes(), "<eos>");
    EXPECT_EQ(lp.top(0).token_bytes(), absl::StrCat("t", lp.top(0).token_id(), " "));
  }
}

// n > 1 with a prompt longer than the token budget: the prompt is chunked over steps, so
// the samples fork from a parent the worker already holds (a cached plan entry). The
// real worker used to refuse that plan, failing the request.
TEST_F(EngineTest, SamplesForkFromAChunkedPrompt) {
  StartServer();
  AddWorker("r0");
  ASSERT_TRUE(WaitReplicas(1));
  weft::v1::GenerateRequest req = Request(4, 8, std::string(150, 'p'));  // budget 64
  req.set_n(3);
  Outcome o = Generate(req);
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_EQ(o.tokens.size(), 12u);
  EXPECT_EQ(o.usage.completion_tokens(), 12);
  EXPECT_TRUE(WaitBlocksFree());
}

// --stream_interval_tokens=4 at any batch: the first message goes out at once, then the tokens in
// messages of four (or more, where a lagging reader's writes merged), the rest with the
// finish; every token, its text and its logprob arrive, in order, for every sample.
TEST_F(EngineTest, StreamIntervalSendsTokensInGroups) {
  StartServer(absl::Seconds(10), [](EngineOptions* eo) {
    eo->stream_interval = {4, /*min_streams=*/1, /*max_hold=*/absl::Seconds(30)};
  });
  AddWorker("r0");
  ASSERT_TRUE(WaitReplicas(1));
  weft::v1::GenerateRequest req = Request(10, 5);
  req.set_logprobs(0);
  Outcome o = Generate(req);
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_EQ(o.tokens, Expected(5, 10));
  EXPECT_LE(o.messages, 4) << "1 + 4 + 4 + 1 tokens";
  EXPECT_EQ(o.logprobs.size(), 10u);
  std::string text;
  for (int32_t t : o.tokens) text += absl::StrCat("t", t, " ");
  EXPECT_EQ(o.text, text);
  EXPECT_EQ(o.reason, weft::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(o.usage.completion_tokens(), 10);

  req = Request(6, 9);
  req.set_n(3);
  o = Generate(req);
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_EQ(o.tokens.size(), 18u) << "every sample's held tokens go out";
  EXPECT_EQ(o.usage.completion_tokens(), 18);
  EXPECT_LE(o.messages, 9) << "per sample: first, 4, last";
  EXPECT_TRUE(WaitBlocksFree());
}

// The default stream interval holds tokens only at large batches: one stream gets a
// message per token (counted as the engine pushes them, whatever the client's pace).
TEST_F(EngineTest, SmallBatchGetsOneMessagePerToken) {
  StartServer();
  AddWorker("r0");
  ASSERT_TRUE(WaitReplicas(1));
  const double pushed = metrics_.stream_messages.Value();
  Outcome o = Generate(10, 5);
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_EQ(o.tokens, Expected(5, 10));
  EXPECT_EQ(metrics_.stream_messages.Value() - pushed, 10);
}

// A batch at --stream_interval_min_streams: tokens travel in groups, and every stream
// still gets each of its tokens exactly once, in order, with its finish and usage.
TEST_F(EngineTest, LargeBatchTokensTravelInGroups) {
  StartServer(absl::Seconds(10), [](EngineOptions* eo) {
    eo->stream_interval = {4, /*min_streams=*/4, /*max_hold=*/absl::Seconds(30)};
  });
  Worker* w = AddWorker("r0");
  ASSERT_TRUE(WaitReplicas(1));
  constexpr int kStreams = 8;
  constexpr int kTokens = 20;
  w->exec->Hang(true);  // the streams start together: every step feeds all of them
  const double pushed = metrics_.stream_messages.Value();
  std::vector<std::thread> ts;
  std::vector<Outcome> outs(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    ts.emplace_back([&, i] { outs[i] = Generate(kTokens, 300 + i); });
  }
  EXPECT_TRUE(Eventually([&] {
    return metrics_.requests_running.Value() + metrics_.requests_waiting.Value() == kStreams;
  }));
  w->exec->Hang(false);
  for (auto& t : ts) t.join();
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(outs[i].status.ok()) << i << ": " << outs[i].status.error_message();
    EXPECT_EQ(outs[i].tokens, Expected(300 + i, kTokens)) << i;
    EXPECT_EQ(outs[i].reason, weft::v1::FINISH_REASON_LENGTH) << i;
    EXPECT_EQ(outs[i].usage.completion_tokens(), kTokens) << i;
  }
  // Per stream: the first token alone, then groups of 4, the rest with the last.
  EXPECT_LE(metrics_.stream_messages.Value() - pushed, kStreams * 7);
  EXPECT_TRUE(WaitBlocksFree());
}

// Held tokens go out once overdue even when no step comes to release them (here the
// worker hangs; a preempted sequence is the same case).
TEST_F(EngineTest, HeldTokensGoOutWhenNoStepFollows) {
  StartServer(absl::Seconds(60), [](EngineOptions* eo) {
    eo->stream_interval = {4, /*min_streams=*/1, /*max_hold=*/absl::Milliseconds(300)};
  });
  Worker* w = AddWorker("r0");
  w->exec->step_ms_ = 5;  // the client reads faster than tokens come: the worker hangs mid-stream
  ASSERT_TRUE(WaitReplicas(1));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));  // hang guard
  auto reader = stub_->Generate(&ctx, Request(60, 9));
  std::vector<int32_t> tokens;
  weft::v1::GenerateResponse r;
  bool hung = false;
  // Once the worker hangs, every token generated so far must arrive.
  while (!hung || static_cast<double>(tokens.size()) < metrics_.generated_tokens.Value()) {
    if (!reader->Read(&r)) {
      w->exec->Hang(false);  // lets the fixture stop the worker
      FAIL() << "held tokens never went out: " << tokens.size() << " of "
             << metrics_.generated_tokens.Value();
    }
    tokens.insert(tokens.end(), r.token_ids().begin(), r.token_ids().end());
    if (!hung && tokens.size() >= 5) {
      w->exec->Hang(true);
      // The worker blocks in its next step; every step before it is applied.
      ASSERT_TRUE(Eventually([&] {
        return w->exec->hung_in_step.load() && w->exec->executed.load() == Steps("r0") + 1;
      }));
      hung = true;
    }
  }
  w->exec->Hang(false);
  while (reader->Read(&r)) tokens.insert(tokens.end(), r.token_ids().begin(), r.token_ids().end());
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(tokens, Expected(9, 60));
}

TEST_F(EngineTest, ManyConcurrentStreamsAllFinishWithTheirOwnTokens) {
  StartServer();
  AddWorker("r0");
  ASSERT_TRUE(WaitReplicas(1));
  std::vector<std::thread> ts;
  std::vector<Outcome> outs(24);
  for (int i = 0; i < 24; ++i) {
    ts.emplace_back([&, i] { outs[i] = Generate(5 + i, 100 + i, std::string(3 + i, 'a' + i % 20)); });
  }
  for (auto& t : ts) t.join();
  for (int i = 0; i < 24; ++i) {
    ASSERT_TRUE(outs[i].status.ok()) << i << ": " << outs[i].status.error_message();
    EXPECT_EQ(outs[i].tokens, Expected(100 + i, 5 + i)) << i;
  }
  EXPECT_TRUE(WaitBlocksFree());
}

TEST_F(EngineTest, CancelFreesBlocks) {
  StartServer();
  Worker* w = AddWorker("r0");
  w->exec->step_ms_ = 5;
  ASSERT_TRUE(WaitReplicas(1));
  grpc::ClientContext ctx;
  Outcome o = Generate(200, 3, "hello", &ctx, /*stop_after=*/3);
  EXPECT_EQ(o.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitBlocksFree());
}

TEST_F(EngineTest, KilledReplicaRequestsFinishOnTheOther) {
  StartServer();
  Worker* a = AddWorker("ra");
  Worker* b = AddWorker("rb");
  a->exec->step_ms_ = 3;
  b->exec->step_ms_ = 3;
  ASSERT_TRUE(WaitReplicas(2));
  std::vector<std::thread> ts;
  std::vector<Outcome> outs(8);
  for (int i = 0; i < 8; ++i) ts.emplace_back([&, i] { outs[i] = Generate(40, 7 + i); });
  // ra is decoding (same prompt: the prefix cache routes them all to the first replica;
  // 8 requests of 40 tokens are far from done after 5 steps).
  EXPECT_TRUE(Eventually([&] { return Steps("ra") >= 5; }));
  a->Stop();  // the stream breaks: replica ra is fenced, its requests re-queued on rb
  for (auto& t : ts) t.join();
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(outs[i].status.ok()) << outs[i].status.error_message();
    EXPECT_EQ(outs[i].tokens, Expected(7 + i, 40)) << "recompute must not change tokens";
  }
  EXPECT_EQ(engine_->num_replicas(), 1);
  EXPECT_TRUE(WaitBlocksFree());
}

TEST_F(EngineTest, HungReplicaIsFencedAfterMissedDeadlines) {
  StartServer(/*deadline_floor=*/absl::Milliseconds(100));
  Worker* a = AddWorker("ra");
  ASSERT_TRUE(WaitReplicas(1));
  a->exec->Hang(true);
  Outcome o = Generate(5, 1);
  EXPECT_EQ(o.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  a->exec->Hang(false);
  EXPECT_TRUE(WaitBlocksFree());
}

TEST_F(EngineTest, StepErrorEndsOnlyThatStepsRequests) {
  StartServer();
  Worker* a = AddWorker("ra");
  ASSERT_TRUE(WaitReplicas(1));
  a->exec->fail_next_ = true;
  Outcome bad = Generate(5, 1);
  EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::INTERNAL);
  Outcome good = Generate(5, 2);
  EXPECT_TRUE(good.status.ok()) << good.status.error_message();
  EXPECT_EQ(engine_->num_replicas(), 1);
  EXPECT_TRUE(WaitBlocksFree());
}

TEST_F(EngineTest, WrongFingerprintIsRefused) {
  StartServer();
  Worker* w = AddWorker("ra", 0, 1, "other");
  w->thread.join();
  EXPECT_THAT(w->result, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_NE(w->result.message().find("fingerprint"), absl::string_view::npos);
  EXPECT_EQ(engine_->num_replicas(), 0);
}

// A worker of another Attach protocol version is refused on the wire: its stream gets a
// Reject naming both versions and ends FAILED_PRECONDITION, the refusal is counted (in
// weft_worker_protocol_mismatches_total and weft_workers_rejected_total), nothing is
// admitted; a WorkerClient (which sends this build's version) is then admitted.
TEST_F(EngineTest, OtherProtocolVersionIsRefusedNamingBothAndCounted) {
  StartServer();
  auto stub = weft::v1::WorkerControl::NewStub(
      grpc::CreateChannel(addr_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));  // a hang guard
  auto stream = stub->Attach(&ctx);
  FakeExecutor exec("newer", 0, 1);
  weft::v1::WorkerMessage hello;
  *hello.mutable_hello() = exec.Hello();
  const int32_t newer = kWorkerProtocolVersion + 1;
  hello.mutable_hello()->set_protocol_version(newer);
  ASSERT_TRUE(stream->Write(hello));
  weft::v1::SchedulerMessage m;
  ASSERT_TRUE(stream->Read(&m));
  ASSERT_TRUE(m.has_reject()) << m.DebugString();
  EXPECT_NE(m.reject().reason().find(absl::StrCat("worker protocol version ", newer)),
            std::string::npos) << m.reject().reason();
  EXPECT_NE(m.reject().reason().find(
                absl::StrCat("scheduler's protocol version ", kWorkerProtocolVersion)),
            std::string::npos) << m.reject().reason();
  EXPECT_FALSE(stream->Read(&m));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(metrics_.worker_protocol_mismatches.Value(), 1);
  EXPECT_EQ(metrics_.workers_rejected.Value(), 1);
  EXPECT_EQ(engine_->num_replicas(), 0);

  AddWorker("current");
  ASSERT_TRUE(WaitReplicas(1));
  EXPECT_EQ(metrics_.worker_protocol_mismatches.Value(), 1);
  EXPECT_EQ(metrics_.workers_rejected.Value(), 1);
}

TEST_F(EngineTest, TensorParallelRanksFormOneReplicaAndDisagreementFences) {
  StartServer();
  Worker* r0 = AddWorker("tp", 0, 2);
  ASSERT_TRUE(Eventually([&] { return metrics_.worker_ranks_pending.Value() == 1; }));
  EXPECT_EQ(engine_->num_replicas(), 0) << "rank 0 alone must not be admitted";
  Worker* r1 = AddWorker("tp", 1, 2);
  ASSERT_TRUE(WaitReplicas(1));
  Outcome o = Generate(6, 9);
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_EQ(o.tokens, Expected(9, 6));
  r1->exec->disagree_ = true;
  Outcome d = Generate(6, 9);
  EXPECT_EQ(d.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  r0->exec->Hang(false);
  EXPECT_TRUE(WaitBlocksFree());
}

// A worker that attaches after the engine stopped (it re-dials while the scheduler
// shuts down) is told so at once, instead of waiting for the server's Shutdown deadline.
TEST_F(EngineTest, WorkerAttachingAfterStopIsClosedAtOnce) {
  StartServer();
  engine_->Stop();
  auto stub = weft::v1::WorkerControl::NewStub(
      grpc::CreateChannel(addr_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  auto stream = stub->Attach(&ctx);
  FakeExecutor exec("late", 0, 1);
  weft::v1::WorkerMessage hello;
  *hello.mutable_hello() = exec.Hello();
  ASSERT_TRUE(stream->Write(hello));
  weft::v1::SchedulerMessage m;
  EXPECT_FALSE(stream->Read(&m));
  grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

TEST_F(EngineTest, DrainFinishesRunningStreamsAndRefusesNewOnes) {
  StartServer();
  Worker* a = AddWorker("ra");
  a->exec->step_ms_ = 2;
  ASSERT_TRUE(WaitReplicas(1));
  Outcome running;
  std::thread t([&] { running = Generate(30, 4); });
  // Admitted and streaming (not merely sent) before the drain begins.
  ASSERT_TRUE(Eventually([&] { return metrics_.generated_tokens.Value() > 0; }));
  engine_->BeginDrain();
  EXPECT_EQ(Generate(3, 1).status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(engine_->WaitDrained(absl::Now() + absl::Seconds(20)), 0);
  t.join();
  EXPECT_TRUE(running.status.ok());
  EXPECT_EQ(running.tokens.size(), 30u);
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// Scale-down: a worker's drain request (its SIGTERM) drains its replica.
class EngineDrainTest : public EngineTest {
 protected:
  // Starts `n` streams of `tokens` tokens (seeds 50, 51, ...) on their own threads.
  void StartStreams(int n, int tokens) {
    outs_.resize(n);
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this, i, tokens] {
        grpc::ClientContext ctx;  // hang guard: a stuck stream fails the test, with state
        ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
        outs_[i] = Generate(tokens, 50 + i, "hello", &ctx);
      });
    }
  }
  std::string State() {
    return absl::StrCat("running ", metrics_.requests_running.Value(), ", waiting ",
                        metrics_.requests_waiting.Value(), ", replicas ", engine_->num_replicas(),
                        ", draining ", metrics_.replicas_draining.Value(), ", blocks used ",
                        BlocksUsed(), ", steps ", engine_->steps_completed());
  }
  void ExpectStreamsComplete(int tokens) {
    for (auto& t : threads_) t.join();
    threads_.clear();
    for (size_t i = 0; i < outs_.size(); ++i) {
      ASSERT_TRUE(outs_[i].status.ok()) << i << ": " << outs_[i].status.error_message() << "; "
                                        << State();
      EXPECT_EQ(outs_[i].tokens, Expected(50 + i, tokens)) << "stream " << i;
    }
  }

  std::vector<Outcome> outs_;
  std::vector<std::thread> threads_;
};

TEST_F(EngineDrainTest, DrainedReplicaFinishesItsStreamsAndItsWorkerIsReleased) {
  StartServer();
  Worker* a = AddWorker("ra");
  Worker* b = AddWorker("rb");
  a->exec->step_ms_ = 3;
  b->exec->step_ms_ = 3;
  ASSERT_TRUE(WaitReplicas(2));
  StartStreams(8, 40);
  ASSERT_TRUE(Eventually([&] { return Steps("ra") >= 2 && Steps("rb") >= 2; }));
  ASSERT_TRUE(a->client->RequestDrain("test"));
  EXPECT_TRUE(a->client->draining());
  EXPECT_FALSE(a->client->ready());
  ASSERT_TRUE(Eventually([&] { return metrics_.replicas_draining.Value() == 1 || a->result.ok(); }));
  // New work goes to rb only.
  Outcome late = Generate(5, 99);
  ASSERT_TRUE(late.status.ok()) << late.status.error_message();
  ExpectStreamsComplete(40);
  a->thread.join();  // Run() returned: released by the scheduler
  EXPECT_TRUE(a->result.ok()) << a->result;
  EXPECT_FALSE(b->client->draining());
  EXPECT_EQ(metrics_.requeued_requests.Value(), 0) << "running streams finished where they ran";
  EXPECT_TRUE(Eventually([&] { return metrics_.replicas_draining.Value() == 0; }));
  EXPECT_EQ(engine_->num_replicas(), 1);
  EXPECT_TRUE(WaitBlocksFree());
}

TEST_F(EngineDrainTest, ADrainTimeoutRequeuesTheRestWithTheirTokens) {
  StartServer(absl::Seconds(10), [](EngineOptions* eo) {
    eo->worker_drain_timeout = absl::Milliseconds(30);
  });
  Worker* a = AddWorker("ra");
  Worker* b = AddWorker("rb");
  a->exec->step_ms_ = 5;
  b->exec->step_ms_ = 5;
  ASSERT_TRUE(WaitReplicas(2));
  StartStreams(6, 120);
  ASSERT_TRUE(Eventually([&] { return Steps("ra") >= 2; }));
  ASSERT_TRUE(a->client->RequestDrain("test"));
  ExpectStreamsComplete(120);  // the re-queued ones recompute: same tokens, none twice
  a->thread.join();
  EXPECT_TRUE(a->result.ok()) << a->result;
  EXPECT_GT(metrics_.requeued_requests.Value(), 0);
  EXPECT_EQ(engine_->num_replicas(), 1);
  EXPECT_TRUE(WaitBlocksFree());
}

TEST_F(EngineDrainTest, AnyRankDrainsTheWholeTensorParallelReplica) {
  StartServer();
  Worker* r0 = AddWorker("tp", 0, 2);
  Worker* r1 = AddWorker("tp", 1, 2);
  r0->exec->step_ms_ = 3;
  r1->exec->step_ms_ = 3;
  ASSERT_TRUE(WaitReplicas(1));
  StartStreams(4, 30);
  // All four running (with no other replica, one still waiting would wait for one).
  ASSERT_TRUE(Eventually([&] { return metrics_.requests_running.Value() == 4; }));
  ASSERT_TRUE(r1->client->RequestDrain("test"));
  ASSERT_TRUE(Eventually([&] { return r0->client->draining(); })) << "rank 0 is told";
  EXPECT_FALSE(r0->client->ready());
  ExpectStreamsComplete(30);
  r0->thread.join();
  r1->thread.join();
  EXPECT_TRUE(r0->result.ok()) << r0->result;
  EXPECT_TRUE(r1->result.ok()) << r1->result;
  EXPECT_EQ(metrics_.requeued_requests.Value(), 0);
  EXPECT_EQ(engine_->num_replicas(), 0);
}

TEST_F(EngineDrainTest, WithNoOtherReplicaNewWorkWaitsForOneToAttach) {
  StartServer();
  Worker* a = AddWorker("ra");
  a->exec->step_ms_ = 3;
  ASSERT_TRUE(WaitReplicas(1));
  StartStreams(1, 60);
  ASSERT_TRUE(Eventually([&] { return Steps("ra") >= 2; }));
  ASSERT_TRUE(a->client->RequestDrain("test"));
  ASSERT_TRUE(Eventually([&] { return metrics_.replicas_draining.Value() == 1; }));
  Outcome waited;
  std::thread late([&] { waited = Generate(5, 77); });
  // The running stream finishes on ra; the late one waits (ra admits nothing), so ra
  // cannot be released before another replica takes it.
  for (auto& t : threads_) t.join();
  threads_.clear();
  ASSERT_TRUE(outs_[0].status.ok()) << outs_[0].status.error_message();
  EXPECT_TRUE(Eventually([&] { return metrics_.requests_waiting.Value() == 1; }));
  EXPECT_EQ(engine_->num_replicas(), 1) << "ra holds the waiting request: not released";
  EXPECT_EQ(metrics_.replicas_draining.Value(), 1);
  AddWorker("rb");
  late.join();
  ASSERT_TRUE(waited.status.ok()) << waited.status.error_message();
  EXPECT_EQ(waited.tokens, Expected(77, 5));
  a->thread.join();
  EXPECT_TRUE(a->result.ok()) << a->result;
  EXPECT_EQ(metrics_.requeued_requests.Value(), 0);
  EXPECT_GT(metrics_.Steps("rb").Value(), 0);
}

// A write target that takes each message and completes it when the test says so.
class RecordingTarget : public WriteTarget<weft::v1::GenerateResponse> {
 public:
  void WriteMessage(const weft::v1::GenerateResponse* m) override {
    tokens += m->token_ids_size();
    pending = true;
  }
  void FinishCall(const absl::Status& s) override { status = s; }
  void CancelCall(const absl::Status& s) override { status = s; }
  int tokens = 0;
  bool pending = false;
  std::optional<absl::Status> status;
};

// No stream ends OK with content lost: a client that reads nothing until its request is
// over gets either every token and OK, or an error, for every length — including the
// lengths where only the stream's last message overflows the buffer (before, the push
// of a finished request's last message was allowed to fail and the call ended OK).
TEST_F(EngineTest, AFinalMessageThatDoesNotFitEndsTheCallInError) {
  StartServer();
  AddWorker("r0");
  ASSERT_TRUE(WaitReplicas(1));
  FrontendOptions fo;
  fo.model_name = "fake";
  fo.stream_buffer_bytes = 1024;
  RequestLimits lim;
  lim.vocab_size = kVocab;
  lim.max_model_len = 256;
  GenerateFrontend small(fo, lim, &encoder_, engine_.get(), &metrics_);
  int last_did_not_fit = 0;
  for (int m = 60; m <= 160; ++m) {
    auto call = small.Start(Request(m, 5), CallContext{});
    ASSERT_TRUE(call.ok()) << call.status();
    const std::shared_ptr<Outbox>& outbox = (*call)->outbox();
    ASSERT_TRUE(Eventually([&] { return outbox->Closed(); })) << m;
    auto target = std::make_shared<RecordingTarget>();
    outbox->Attach(target);
    while (target->pending) {
      target->pending = false;
      outbox->OnWriteDone(true);
    }
    ASSERT_TRUE(target->status.has_value()) << m;
    outbox->OnCallDone();
    if (target->status->ok()) {
      EXPECT_EQ(target->tokens, m) << "ended OK with tokens missing";
    } else {
      EXPECT_EQ(target->status->code(), absl::StatusCode::kResourceExhausted) << *target->status;
      if (absl::StrContains(target->status->message(), "last message")) ++last_did_not_fit;
    }
  }
  EXPECT_GT(last_did_not_fit, 0) << "no length made only the last message overflow";
  EXPECT_TRUE(WaitBlocksFree());
}

}  // namespace
}  // namespace weft

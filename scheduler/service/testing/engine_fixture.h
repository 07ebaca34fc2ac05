// The engine test fixture: the engine end to end on loopback with fake workers — real
// gRPC services, real WorkerClients and real plan application (StateCache); only the
// model is fake (tokens are a function of seed, sample and position, so expected outputs
// are known). Shared by engine_test.cc and engine_drain_test.cc.
#ifndef WEFT_SCHEDULER_SERVICE_TESTING_ENGINE_FIXTURE_H_
#define WEFT_SCHEDULER_SERVICE_TESTING_ENGINE_FIXTURE_H_

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

namespace weft::engine_testing {

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
inline int32_t FakeToken(uint64_t seed, int32_t sample, int32_t i) {
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
    const int n = ++executed;
    {
      MutexLock l(&hang_mu_);
      if (n == hang_at_step_) hang_ = true;
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

  // A hung worker: steps block until Hang(false), which also drops a HangAtStep not
  // reached yet (TearDown lets go of a test that failed before its step came).
  void Hang(bool hang) {
    MutexLock l(&hang_mu_);
    hang_ = hang;
    if (!hang) hang_at_step_ = 0;
    hang_cv_.SignalAll();
  }
  // The worker hangs in its n-th plan (1-based), as Hang(true) then: a point mid-stream
  // that does not depend on how fast the test's client reads.
  void HangAtStep(int n) {
    MutexLock l(&hang_mu_);
    hang_at_step_ = n;
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
  int hang_at_step_ ABSL_GUARDED_BY(hang_mu_) = 0;  // 0: none
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
    // No test here ends a stream for not reading; 1 s once stood here, a wall-clock
    // bound on gRPC's threads completing writes (and on calls read only once closed).
    eo.stall_timeout = absl::Seconds(60);
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
    for (auto& w : workers_) {
      w->exec->Hang(false);  // a test that failed while a worker hung: let its step end
      w->Stop();
    }
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


}  // namespace weft::engine_testing

#endif  // WEFT_SCHEDULER_SERVICE_TESTING_ENGINE_FIXTURE_H_

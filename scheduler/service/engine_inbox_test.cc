// The engine's threads without gRPC's: clients and worker ranks are fakes at the reactor
// boundary (WriteTarget), each on its own thread, so that TSan sees every thread that
// touches the engine — the planning thread, submitters, cancellers, the ranks answering
// plans, the stream "transports" completing writes. (Debian's gRPC is not built with
// TSan; with it, every handoff gRPC orders internally looks like a race.) The plumbing
// itself is covered by engine_test and the services' tests over real gRPC.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/protocol_version.h"
#include "common/shard_layout.h"
#include "common/tokens_hash.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/service/engine.h"

namespace weft {
namespace {

using ::weft::testing::StatusIs;

constexpr int32_t kVocab = 64;
constexpr int32_t kEos = 63;
constexpr int32_t kToken = 7;  // every sampled token (never EOS)

class Text : public TokenTextSource {
 public:
  absl::string_view TokenBytes(int32_t id) const override { return id == kEos ? "" : "t "; }
};

// The fake streams' ends (clients' and ranks'), as events a test can wait for.
class Ends {
 public:
  void Add() {
    MutexLock l(&mu_);
    ++ends_;
    cv_.SignalAll();
  }
  // Waits until `pred` holds, re-checking it at every end; false after a 30 s hang guard.
  template <typename Pred>
  bool WaitFor(Pred pred) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    MutexLock l(&mu_);
    while (!pred()) {
      if (absl::Now() >= deadline) return false;
      cv_.WaitWithTimeout(&mu_, deadline - absl::Now());
    }
    return true;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  int64_t ends_ ABSL_GUARDED_BY(mu_) = 0;
};

// What a stream's transport does, on its own thread: takes each write the queue starts,
// hands it to `on_write`, completes it; once the finish comes, ends the call.
template <typename Message>
class FakeTransport : public WriteTarget<Message> {
 public:
  using OnWrite = std::function<void(const Message&)>;
  using OnEnd = std::function<void(const absl::Status&)>;

  FakeTransport(WriteQueue<Message>* queue, OnWrite on_write, OnEnd on_end)
      : queue_(queue), on_write_(std::move(on_write)), on_end_(std::move(on_end)) {
    // Like a gRPC reactor, it outlives the call (the destructor waits for its end).
    queue_->Attach(NotOwned<Message>(this));
    thread_ = std::thread([this] { Run(); });
  }
  ~FakeTransport() override { thread_.join(); }

  void WriteMessage(const Message* m) override {
    MutexLock l(&mu_);
    pending_ = m;
    cv_.SignalAll();
  }
  void FinishCall(const absl::Status& s) override {
    MutexLock l(&mu_);
    finish_ = s;
    finished_ = true;
    cv_.SignalAll();
  }
  void CancelCall(const absl::Status&) override {}

 private:
  void Run() {
    while (true) {
      const Message* m = nullptr;
      absl::Status end;
      {
        MutexLock l(&mu_);
        while (pending_ == nullptr && !finished_) cv_.Wait(&mu_);
        std::swap(m, pending_);
        end = finish_;
      }
      if (m == nullptr) {  // the call is finished
        queue_->OnCallDone();
        on_end_(end);
        return;
      }
      on_write_(*m);
      queue_->OnWriteDone(true);
    }
  }

  WriteQueue<Message>* const queue_;
  const OnWrite on_write_;
  const OnEnd on_end_;
  Mutex mu_;
  CondVar cv_;
  const Message* pending_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status finish_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// A worker rank: answers every plan with kToken for each sampled sequence.
class FakeRank {
 public:
  FakeRank(Engine* engine, Ends* ends, int64_t id, const std::string& replica, int rank,
           int world)
      : engine_(engine), rank_(rank), handle_(std::make_shared<WorkerHandle>(id, "fake")) {
    transport_ = std::make_unique<FakeTransport<grpc::ByteBuffer>>(
        handle_.get(), [this](const grpc::ByteBuffer& b) { Answer(b); },
        [this, ends](const absl::Status& st) {
          {
            MutexLock l(&mu_);
            ended_ = true;
            status_ = st;
          }
          engine_->OnWorkerGone(handle_);
          ends->Add();
        });
    weft::v1::WorkerMessage m;
    weft::v1::WorkerHello* h = m.mutable_hello();
    h->set_protocol_version(kWorkerProtocolVersion);  // what WorkerClient sends
    h->set_model_fingerprint("fp");
    h->set_replica(replica);
    h->set_rank(rank);
    h->set_world_size(world);
    h->set_block_size(4);
    h->set_num_kv_blocks(256);
    h->set_vocab_size(kVocab);
    h->set_shard_layout(ComputeShardLayout(4, 2, 64, kVocab, world, rank)->ToString());
    engine_->OnWorkerMessage(handle_, std::move(m));
  }
  // The stream breaks (as WorkerReactor::OnCancel reports it).
  void Break() {
    engine_->OnWorkerGone(handle_);
    handle_->Close(absl::CancelledError("cancelled"));
  }
  // The scheduler ended the stream; with this status.
  bool ended() {
    MutexLock l(&mu_);
    return ended_;
  }
  absl::Status status() {
    MutexLock l(&mu_);
    return status_;
  }
  // The next `n` plans with sequences fail on this rank (the worker reports an error).
  void FailPlans(int n) { fail_plans_ = n; }

 private:
  void Answer(const grpc::ByteBuffer& bytes) {
    grpc::ByteBuffer copy = bytes;
    weft::v1::SchedulerMessage in;
    ASSERT_TRUE(grpc::SerializationTraits<weft::v1::SchedulerMessage>::Deserialize(&copy, &in).ok());
    if (!in.has_plan()) return;
    weft::v1::WorkerMessage out;
    weft::v1::StepResult* r = out.mutable_result();
    r->set_step_id(in.plan().step_id());
    r->set_rank(rank_);
    if (in.plan().num_scheduled_tokens() > 0 && fail_plans_.fetch_sub(1) > 0) {
      r->set_error("injected failure");
      engine_->OnWorkerMessage(handle_, std::move(out));
      return;
    }
    std::vector<SequenceRef> order;
    SampledSequences(in.plan(), &order);
    for (SequenceRef ref : order) {
      weft::v1::SampledToken* t = r->add_tokens();
      t->set_seq_id(ref.seq_id());
      t->set_token_id(kToken);
    }
    r->set_tokens_hash(TokensHash(*r));
    engine_->OnWorkerMessage(handle_, std::move(out));
  }

  Engine* const engine_;
  const int rank_;
  const std::shared_ptr<WorkerHandle> handle_;
  std::atomic<int> fail_plans_{0};
  Mutex mu_;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<FakeTransport<grpc::ByteBuffer>> transport_;  // last: joined first
};

// The engine's request limits (the core's: FakeClient validates against them).
RequestLimits Limits() {
  RequestLimits l;
  l.max_model_len = 256;
  l.vocab_size = kVocab;
  l.max_n = 8;  // max_num_seqs
  return l;
}

// A Generate stream: collects what the engine writes until the call ends.
class FakeClient {
 public:
  FakeClient(Engine* engine, Ends* ends, int64_t key, int max_tokens)
      : engine_(engine), key_(key) {
    RequestSpec spec;
    spec.prompt_token_ids = {1, 2, 3, static_cast<int32_t>(key % 50)};
    spec.stopping.max_tokens = max_tokens;
    spec.sampling.seed = static_cast<uint64_t>(key);
    Submission s;
    s.key = key;
    s.request = *ValidateRequest(std::move(spec), Limits());
    s.outbox = std::make_shared<Outbox>(1 << 20);
    s.arrival = absl::Now();
    outbox_ = s.outbox;
    transport_ = std::make_unique<FakeTransport<weft::v1::GenerateResponse>>(
        outbox_.get(),
        [this](const weft::v1::GenerateResponse& r) {
          MutexLock l(&mu_);
          tokens_ += r.token_ids_size();
        },
        [this, ends](const absl::Status& st) {
          {
            MutexLock l(&mu_);
            status_ = st;
            ended_ = true;
          }
          ends->Add();
        });
    if (absl::Status st = engine_->Submit(std::move(s)); !st.ok()) {
      outbox_->Finish(absl::UnavailableError(std::string(st.message())));
    }
  }
  // The client goes away (as ResponseReactor::OnCancel reports it).
  void Cancel() {
    engine_->Cancel(key_);
    outbox_->Finish(absl::CancelledError("cancelled"));
  }
  int tokens() {
    MutexLock l(&mu_);
    return tokens_;
  }
  bool ended() {
    MutexLock l(&mu_);
    return ended_;
  }
  absl::Status status() {
    MutexLock l(&mu_);
    return status_;
  }

 private:
  Engine* const engine_;
  const int64_t key_;
  std::shared_ptr<Outbox> outbox_;
  std::unique_ptr<FakeTransport<weft::v1::GenerateResponse>> transport_;
  Mutex mu_;
  int tokens_ ABSL_GUARDED_BY(mu_) = 0;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

class EngineInboxTest : public ::testing::Test {
 protected:
  EngineInboxTest() {
    EngineOptions eo;
    eo.core.block_size = 4;
    eo.core.limits = Limits();
    eo.core.eos_token_ids = {kEos};
    eo.core.max_num_batched_tokens = 32;
    eo.core.max_num_seqs = 8;
    ExpectedModel em;
    em.fingerprint = "fp";
    em.block_size = 4;
    em.vocab_size = kVocab;
    em.n_head = 4;
    em.n_head_kv = 2;
    em.n_ff = 64;
    engine_ = std::make_unique<Engine>(eo, em, weft::v1::ModelInfo(), &text_, &metrics_,
                                       nullptr);
    EXPECT_TRUE(engine_->Start().ok());
  }
  ~EngineInboxTest() override {
    engine_->Stop();
    clients_.clear();  // joins their transports: every stream has ended
    ranks_.clear();
  }

  FakeRank* AddRank(const std::string& replica, int rank, int world) {
    ranks_.push_back(
        std::make_unique<FakeRank>(engine_.get(), &ends_, next_id_++, replica, rank, world));
    return ranks_.back().get();
  }
  // `threads` submitters, `each` requests apiece (max_tokens 4 .. 11).
  void SubmitConcurrently(int threads, int each) {
    std::vector<std::vector<std::unique_ptr<FakeClient>>> made(threads);
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) {
      ts.emplace_back([&, t] {
        for (int i = 0; i < each; ++i) {
          const int64_t key = 1000 * (t + 1) + i;
          made[t].push_back(std::make_unique<FakeClient>(engine_.get(), &ends_, key, 4 + i % 8));
        }
      });
    }
    for (std::thread& t : ts) t.join();
    for (auto& v : made) {
      for (auto& c : v) clients_.push_back(std::move(c));
    }
  }
  bool AllEnded() {
    for (auto& c : clients_) {
      if (!c->ended()) return false;
    }
    return true;
  }
  // Waits (a 30 s hang guard) for the engine's state after its loop iterations.
  bool EngineReaches(const std::function<bool()>& done) {
    return engine_->WaitUntil(done, absl::Now() + absl::Seconds(30));
  }
  bool WaitAllEnded() { return ends_.WaitFor([&] { return AllEnded(); }); }

  Text text_;
  ServiceMetrics metrics_;
  Ends ends_;  // before the streams that report to it
  std::unique_ptr<Engine> engine_;
  int64_t next_id_ = 1;
  std::vector<std::unique_ptr<FakeRank>> ranks_;
  std::vector<std::unique_ptr<FakeClient>> clients_;
};

TEST_F(EngineInboxTest, ConcurrentClientsOnTwoReplicasOneOfThemTensorParallel) {
  AddRank("tp", 0, 2);
  AddRank("tp", 1, 2);
  AddRank("solo", 0, 1);
  ASSERT_TRUE(EngineReaches([&] { return engine_->num_replicas() == 2; }));
  SubmitConcurrently(/*threads=*/4, /*each=*/6);
  ASSERT_TRUE(WaitAllEnded());
  for (size_t i = 0; i < clients_.size(); ++i) {
    EXPECT_TRUE(clients_[i]->status().ok()) << i << ": " << clients_[i]->status();
  }
  EXPECT_EQ(engine_->num_replicas(), 2) << "no replica was fenced";
  int tokens = 0;
  for (auto& c : clients_) tokens += c->tokens();
  EXPECT_EQ(tokens, 4 * (4 + 5 + 6 + 7 + 8 + 9));
  EXPECT_TRUE(EngineReaches([&] { return metrics_.kv_blocks_used.Value() == 0; }));
}

TEST_F(EngineInboxTest, CancelsAndABrokenReplicaRaceWithSteps) {
  AddRank("a", 0, 1);
  FakeRank* b = AddRank("b", 0, 1);
  ASSERT_TRUE(EngineReaches([&] { return engine_->num_replicas() == 2; }));
  SubmitConcurrently(/*threads=*/3, /*each=*/6);
  std::thread canceller([&] {
    for (size_t i = 0; i < clients_.size(); i += 3) clients_[i]->Cancel();
  });
  std::thread breaker([&] { b->Break(); });
  canceller.join();
  breaker.join();
  ASSERT_TRUE(WaitAllEnded());
  for (size_t i = 0; i < clients_.size(); ++i) {
    const absl::StatusCode code = clients_[i]->status().code();
    EXPECT_TRUE(code == absl::StatusCode::kOk || code == absl::StatusCode::kCancelled) << i;
  }
  EXPECT_TRUE(EngineReaches([&] { return engine_->num_replicas() == 1; }));
  EXPECT_TRUE(EngineReaches([&] { return metrics_.kv_blocks_used.Value() == 0; }));
}

// A failed step (the worker reports an error) ends only its own requests, INTERNAL, while
// clients keep arriving: the core retires it (Scheduler::FailStep) and the replica serves on.
TEST_F(EngineInboxTest, FailedStepsEndTheirRequestsWhileOthersArrive) {
  FakeRank* a = AddRank("a", 0, 1);
  ASSERT_TRUE(EngineReaches([&] { return engine_->num_replicas() == 1; }));
  a->FailPlans(1);
  SubmitConcurrently(/*threads=*/3, /*each=*/4);
  ASSERT_TRUE(WaitAllEnded());
  int failed = 0;
  for (size_t i = 0; i < clients_.size(); ++i) {
    const absl::StatusCode code = clients_[i]->status().code();
    EXPECT_TRUE(code == absl::StatusCode::kOk || code == absl::StatusCode::kInternal) << i;
    failed += code == absl::StatusCode::kInternal;
  }
  EXPECT_GE(failed, 1);
  EXPECT_LT(failed, static_cast<int>(clients_.size()));
  EXPECT_EQ(engine_->num_replicas(), 1) << "a failed step is not a protocol error";
  EXPECT_TRUE(EngineReaches([&] { return metrics_.kv_blocks_used.Value() == 0; }));
}

TEST_F(EngineInboxTest, StopWhileStreamsRunEndsEveryStream) {
  AddRank("a", 0, 1);
  ASSERT_TRUE(EngineReaches([&] { return engine_->num_replicas() == 1; }));
  SubmitConcurrently(/*threads=*/2, /*each=*/8);
  std::thread stopper([&] { engine_->Stop(); });
  stopper.join();
  ASSERT_TRUE(WaitAllEnded());
  for (auto& c : clients_) {
    const absl::StatusCode code = c->status().code();
    EXPECT_TRUE(code == absl::StatusCode::kOk || code == absl::StatusCode::kUnavailable) << code;
  }
}

// A rank waiting for its peers holds a stream too: Stop ends it, as it ends the ranks of
// admitted replicas (else the server's Shutdown waits for it until its deadline).
TEST_F(EngineInboxTest, StopEndsTheStreamsOfRanksWaitingForTheirPeers) {
  FakeRank* admitted = AddRank("solo", 0, 1);
  FakeRank* waiting = AddRank("tp", 0, 2);
  ASSERT_TRUE(EngineReaches([&] {
    return engine_->num_replicas() == 1 && metrics_.worker_ranks_pending.Value() == 1;
  }));
  engine_->Stop();
  const bool ended = ends_.WaitFor([&] { return admitted->ended() && waiting->ended(); });
  if (!waiting->ended()) waiting->Break();  // so that the fixture can join its transport
  ASSERT_TRUE(ended) << "admitted " << admitted->ended() << ", waiting " << waiting->ended();
  EXPECT_THAT(admitted->status(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(waiting->status(), StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace weft

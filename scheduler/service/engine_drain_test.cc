// The engine end to end on loopback with fake workers (testing/engine_fixture.h): a
// worker's drain (its replica finishes, times out and re-queues, waits for another), and
// a final message too large for the stream buffer.
#include <atomic>
#include <optional>
#include <functional>
#include <thread>

#include "scheduler/service/testing/engine_fixture.h"

namespace weft::engine_testing {
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
  // ra hangs in its third step: its streams are still running when the drain times out,
  // however late the test's thread asks for the drain.
  a->exec->HangAtStep(3);
  ASSERT_TRUE(WaitReplicas(2));
  StartStreams(6, 120);
  ASSERT_TRUE(Eventually([&] { return Steps("ra") >= 2; }));
  ASSERT_TRUE(a->client->RequestDrain("test"));
  ExpectStreamsComplete(120);  // the re-queued ones recompute: same tokens, none twice
  a->exec->Hang(false);  // its Run returns once its step ends
  a->thread.join();
  EXPECT_TRUE(a->result.ok()) << a->result;
  EXPECT_GT(metrics_.requeued_requests.Value(), 0);
  // The count is published at the end of the loop's iteration, after the drain's last
  // message reached the worker: wait for it (a read at once failed under load).
  EXPECT_TRUE(Eventually([&] { return engine_->num_replicas() == 1; })) << State();
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
  // Published at the end of the iteration that released the ranks (after they were told:
  // reading it as soon as Run returned failed 1 run in 20 under load).
  EXPECT_TRUE(Eventually([&] { return engine_->num_replicas() == 0; })) << State();
}

TEST_F(EngineDrainTest, WithNoOtherReplicaNewWorkWaitsForOneToAttach) {
  StartServer();
  Worker* a = AddWorker("ra");
  a->exec->step_ms_ = 3;
  ASSERT_TRUE(WaitReplicas(1));
  // The stream is held in its first step until the late request waits: without the hold
  // a slow test thread let it finish first, and ra (drained, holding nothing) was
  // released before the late request came (the fixture's TearDown lets a hang go).
  a->exec->Hang(true);
  StartStreams(1, 60);
  ASSERT_TRUE(Eventually([&] { return a->exec->hung_in_step.load(); })) << State();
  ASSERT_TRUE(a->client->RequestDrain("test"));
  ASSERT_TRUE(Eventually([&] { return metrics_.replicas_draining.Value() == 1; }));
  Outcome waited;
  std::thread late([&] { waited = Generate(5, 77); });
  ASSERT_TRUE(Eventually([&] { return metrics_.requests_waiting.Value() == 1; })) << State();
  a->exec->Hang(false);
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
  // No forward-pass time: each call is read only once it has closed, so the ~11,000
  // steps of the sweep below need no pace (1 ms each was 18 s of the suite).
  AddWorker("r0")->exec->step_ms_ = 0;
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
}  // namespace weft::engine_testing

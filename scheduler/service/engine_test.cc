// The engine end to end on loopback with fake workers (testing/engine_fixture.h):
// streams, logprobs, forks, the stream interval, cancellation, replicas lost, hung or
// refused, tensor-parallel ranks, the scheduler's drain.
#include <atomic>
#include <optional>
#include <functional>
#include <thread>

#include "scheduler/service/testing/engine_fixture.h"

namespace weft::engine_testing {
namespace {

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
  // Asked for again once no running request asks (the engine skips the per-token
  // lookup while none does): still one entry per token.
  EXPECT_EQ(Generate(req).logprobs.size(), 6u);
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
  // The worker hangs mid-stream in its 12th step (11 tokens generated: 1, then 4 + 4
  // sent, 2 held while steps come fast), whatever the client's pace: hung from the
  // client's side, a client that read late could find the request already finished.
  w->exec->HangAtStep(12);
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
      // The worker blocks in its 12th step; every step before it is applied.
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
  // The stream cannot end before the client cancels after 3 tokens, however late it
  // reads: the worker hangs in its 10th step until the call is over.
  w->exec->HangAtStep(10);
  ASSERT_TRUE(WaitReplicas(1));
  grpc::ClientContext ctx;
  Outcome o = Generate(200, 3, "hello", &ctx, /*stop_after=*/3);
  EXPECT_EQ(o.status.error_code(), grpc::StatusCode::CANCELLED);
  w->exec->Hang(false);
  EXPECT_TRUE(WaitBlocksFree());
}

TEST_F(EngineTest, KilledReplicaRequestsFinishOnTheOther) {
  StartServer();
  Worker* a = AddWorker("ra");
  Worker* b = AddWorker("rb");
  a->exec->step_ms_ = 3;
  b->exec->step_ms_ = 3;
  // ra holds its requests mid-stream (8 requests of 40 tokens are far from done after
  // 5 steps) until its stream has broken, however slow the machine.
  a->exec->HangAtStep(6);
  ASSERT_TRUE(WaitReplicas(2));
  std::vector<std::thread> ts;
  std::vector<Outcome> outs(8);
  for (int i = 0; i < 8; ++i) ts.emplace_back([&, i] { outs[i] = Generate(40, 7 + i); });
  // ra is decoding (same prompt: the prefix cache routes them all to the first replica).
  // EXPECT, not ASSERT, while client threads run (they must be joined).
  EXPECT_TRUE(Eventually([&] { return a->exec->hung_in_step.load(); }));
  const double rb_steps = Steps("rb");
  a->client->Stop();  // the stream breaks while ra's step is still running...
  EXPECT_TRUE(Eventually([&] { return engine_->num_replicas() == 1; }));  // ...ra is fenced
  a->exec->Hang(false);
  a->Stop();
  for (auto& t : ts) t.join();
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(outs[i].status.ok()) << outs[i].status.error_message();
    EXPECT_EQ(outs[i].tokens, Expected(7 + i, 40)) << "recompute must not change tokens";
  }
  EXPECT_GT(Steps("rb"), rb_steps) << "ra's requests were re-queued and finished on rb";
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
  // The stream is mid-generation when the drain begins, however slow the machine: the
  // worker holds its 5th step until the drain has refused a new call.
  a->exec->HangAtStep(5);
  ASSERT_TRUE(WaitReplicas(1));
  Outcome running;
  std::thread t([&] { running = Generate(30, 4); });
  EXPECT_TRUE(Eventually([&] { return a->exec->hung_in_step.load(); }));  // t must be joined
  engine_->BeginDrain();
  EXPECT_EQ(Generate(3, 1).status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(metrics_.requests_running.Value(), 1) << "the running stream goes on";
  a->exec->Hang(false);
  EXPECT_EQ(engine_->WaitDrained(absl::Now() + absl::Seconds(20)), 0);
  t.join();
  EXPECT_TRUE(running.status.ok());
  EXPECT_EQ(running.tokens.size(), 30u);
}

}  // namespace
}  // namespace weft::engine_testing

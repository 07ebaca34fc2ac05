// Table-driven planner tests: per iteration, which sequences are scheduled with how
// many tokens (see Describe() in testing/harness.h for the notation), per policy.
#include "scheduler/scheduler.h"

#include <limits>
#include <string>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/testing/harness.h"

namespace weft {
namespace {

using ::weft::testing::StatusIs;

SchedulerOptions Opts(PolicyKind policy, int32_t budget, int32_t block_size = 4) {
  SchedulerOptions o;
  o.policy = policy;
  o.block_size = block_size;
  o.max_num_batched_tokens = budget;
  o.max_num_seqs = 16;
  o.limits.max_model_len = 4096;
  o.admission_watermark = 0;
  return o;
}

// Runs steps on replica 0 and compares each plan with the table row.
void ExpectSteps(TestHarness& h, const std::vector<std::string>& rows) {
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(h.Step(), rows[i]) << "iteration " << i + 1;
  }
}

void RunToCompletion(TestHarness& h, int index = 0, int max_steps = 1000) {
  for (int i = 0; i < max_steps && h.scheduler().num_unfinished_requests() > 0; ++i) h.Step(index);
  ASSERT_EQ(h.scheduler().num_unfinished_requests(), 0);
  h.Step(index);  // deliver the last finished ids
  absl::Status s = h.VerifyFinished();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(h.scheduler().Metrics().kv_blocks_used, 0);
}

TEST(PlannerTableTest, DecodeFirstChunkedPrefillAcrossIterations) {
  TestHarness h(Opts(PolicyKind::kDecodeFirst, /*budget=*/10), {64});
  h.AddSimple(12, 3);
  h.AddSimple(6, 3, 0, 1, /*first_token=*/100);
  ExpectSteps(h, {
                     "*1:10",      // R1's prompt is chunked: 10 of 12
                     "*2:6 1:2",   // R1 finishes its prompt (samples), R2 fits whole
                     "1:1 2:1",    // both decode
                     "1:1 2:1",    // third token each: both finish (length)
                     "x1 x2",      // the workers drop them
                     "",           // nothing left
                 });
  EXPECT_TRUE(h.VerifyFinished().ok());
  EXPECT_EQ(h.output(RequestId(1)).finish_reason, FinishReason::kLength);
}

TEST(PlannerTableTest, DecodeFirstKeepsDecodingWhileALongPromptArrives) {
  TestHarness h(Opts(PolicyKind::kDecodeFirst, 8), {64});
  h.AddSimple(4, 6);
  ExpectSteps(h, {"*1:4", "1:1"});
  h.AddSimple(16, 2, 0, 1, 200);
  ExpectSteps(h, {
                     "*2:7 1:1",  // the decode goes first; R2's prompt takes the rest
                     "1:1 2:7",
                     "1:1 2:2",   // R2's prompt done
                     "1:1 2:1",   // R1: 6 tokens, R2: 2 tokens: both finish
                     "x1 x2",
                 });
  EXPECT_TRUE(h.VerifyFinished().ok());
}

TEST(PlannerTableTest, PrefillFirstRunsThePromptBeforeDecodes) {
  TestHarness h(Opts(PolicyKind::kPrefillFirst, 8), {64});
  h.AddSimple(4, 6);
  ExpectSteps(h, {"*1:4", "1:1"});
  h.AddSimple(16, 2, 0, 1, 200);
  ExpectSteps(h, {
                     "*2:8",      // prefill first: R1's decode gets no budget
                     "2:8",       // R2's prompt done (samples its first token)
                     "1:1 2:1",   // decodes resume; R2 finishes (2 tokens)
                     "1:1 x2",
                 });
  RunToCompletion(h);
}

TEST(PlannerTableTest, StaticBatchReservesUpFrontAndWaitsForTheWholeBatch) {
  SchedulerOptions o = Opts(PolicyKind::kStatic, 16);
  o.max_num_seqs = 4;
  TestHarness h(o, {64});
  h.AddSimple(8, 2);
  h.AddSimple(8, 5, 0, 1, 100);
  h.AddSimple(8, 3, 0, 1, 200);
  // Admission is bounded by blocks and max_num_seqs, not the budget: R3 joins the
  // batch (its blocks reserved now) but is sent only when it gets tokens, next
  // iteration: a plan entry never schedules 0 tokens.
  EXPECT_EQ(h.Step(), "*1:8 *2:8");
  // Reservation: prompt + max_tokens, all blocks at once.
  ASSERT_EQ(h.last_plan().new_sequences_size(), 2u);
  EXPECT_EQ(h.last_plan().new_sequences(0).block_ids_size(), 3u);  // (8+2)/4 → 3
  EXPECT_EQ(h.last_plan().new_sequences(1).block_ids_size(), 4u);  // (8+5)/4 → 4
  EXPECT_EQ(h.scheduler().Metrics().kv_blocks_used, 10);          // R3's 3 held too
  h.AddSimple(4, 1, 0, 1, 300);  // must wait for the whole batch
  EXPECT_EQ(h.Step(), "*3:8 1:1 2:1");  // R1 done (2 tokens)
  ASSERT_EQ(h.last_plan().new_sequences_size(), 1u);
  EXPECT_EQ(h.last_plan().new_sequences(0).block_ids_size(), 3u);  // (8+3)/4 → 3
  ExpectSteps(h, {
                     "2:1 3:1 x1",
                     "2:1 3:1",      // R3 done (3 tokens)
                     "2:1 x3",       // R2 done (5 tokens): the batch is over
                     "*4:4 x2",      // only now the next batch
                     "x4",
                 });
  EXPECT_TRUE(h.VerifyFinished().ok());
  EXPECT_EQ(h.scheduler().counters().preemptions_total, 0);
}

TEST(PlannerTableTest, PreemptionByRecomputeAndResume) {
  TestHarness h(Opts(PolicyKind::kDecodeFirst, 32), {5});
  h.AddSimple(8, 8);
  h.AddSimple(8, 8, 0, 1, 100);
  ExpectSteps(h, {
                     "*1:8 *2:8",  // 2 blocks each, 1 left
                     "1:1 -2",     // R1 takes the last block; R2 (latest) is the victim
                     "1:1",        // R2 does not fit back yet
                 });
  const Sequence* r2 = h.scheduler().FindSequence(SequenceRef{RequestId(2), 0});
  ASSERT_NE(r2, nullptr);
  EXPECT_EQ(r2->state, SequenceState::kPreempted);
  EXPECT_EQ(r2->num_output_tokens(), 1);  // its generated token is kept
  EXPECT_EQ(h.scheduler().counters().preemptions_total, 1);
  // Run until R2 is resumed: sent as new again, with prompt + its output so far.
  bool resumed = false;
  for (int i = 0; i < 20 && !resumed; ++i) {
    h.Step();
    for (const auto& e : h.last_plan().new_sequences()) {
      if (SequenceRef::FromSeqId(e.seq_id()).request_id == RequestId(2)) {
        resumed = true;
        EXPECT_TRUE(e.resumed());
        EXPECT_EQ(e.token_ids_size(), 9);
        EXPECT_EQ(e.num_prompt_tokens(), 8);
      }
    }
  }
  EXPECT_TRUE(resumed);
  RunToCompletion(h);  // outputs equal an uninterrupted run (reference)
  EXPECT_EQ(h.output(RequestId(2)).usage.num_preemptions, 1);
}

TEST(PlannerTableTest, HigherPriorityIsServedFirstAndPreemptedLast) {
  TestHarness h(Opts(PolicyKind::kDecodeFirst, 8), {64});
  h.AddSimple(8, 2, /*priority=*/0);
  h.AddSimple(8, 2, /*priority=*/1, 1, 100);
  ExpectSteps(h, {"*2:8", "*1:7 2:1", "1:1 x2", "1:1", "x1"});

  // Victim choice: the lower-priority sequence yields even though it arrived first.
  TestHarness v(Opts(PolicyKind::kDecodeFirst, 64), {4});
  v.AddSimple(8, 4, /*priority=*/0);
  v.AddSimple(8, 4, /*priority=*/1, 1, 30);
  EXPECT_EQ(v.Step(), "*2:8 *1:8");  // 4 blocks used, none free
  EXPECT_EQ(v.Step(), "2:1 -1");     // R2 needs a block: R1 is preempted
  RunToCompletion(v);
}

// The queue key of priority -2^31 is its negation: it must not wrap to the top.
TEST(PlannerTableTest, LowestPossiblePriorityIsServedLast) {
  TestHarness h(Opts(PolicyKind::kDecodeFirst, 8), {64});
  h.AddSimple(8, 2, /*priority=*/std::numeric_limits<int32_t>::min());
  h.AddSimple(8, 2, /*priority=*/0, 1, 100);
  EXPECT_EQ(h.Step(), "*2:8");
  RunToCompletion(h);
}

TEST(PlannerTableTest, SharedHundredTokenPrefixIsComputedOnce) {
  TestHarness h(Opts(PolicyKind::kDecodeFirst, 512, /*block_size=*/16), {64});
  RequestSpec a, b;
  for (int i = 0; i < 100; ++i) a.prompt_token_ids.push_back(1 + i % 60);
  b.prompt_token_ids = a.prompt_token_ids;
  for (int i = 0; i < 20; ++i) {
    a.prompt_token_ids.push_back(3 + i % 7);
    b.prompt_token_ids.push_back(5 + i % 11);
  }
  a.stopping.max_tokens = b.stopping.max_tokens = 4;
  a.stopping.ignore_eos = b.stopping.ignore_eos = true;
  ASSERT_TRUE(h.Add(a).ok());
  EXPECT_EQ(h.Step(), "*1:120");
  ASSERT_TRUE(h.Add(b).ok());
  // 6 full blocks (96 tokens) of the shared prefix come from the cache; the 4 shared
  // tokens in R1's 7th block are recomputed (that block's hash covers unshared tokens).
  EXPECT_EQ(h.Step(), "*2:24 1:1");
  EXPECT_EQ(h.last_plan().new_sequences(0).num_computed_tokens(), 96);
  EXPECT_EQ(h.scheduler().counters().prefix_cache_hit_tokens_total, 96);
  RunToCompletion(h);
  EXPECT_EQ(h.output(RequestId(2)).usage.num_cached_prompt_tokens, 96);
  EXPECT_EQ(h.output(RequestId(1)).usage.num_cached_prompt_tokens, 0);
  // Idle: nothing referenced; the prefix stays cached for the next request.
  SchedulerMetrics m = h.scheduler().Metrics();
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_GT(m.kv_blocks_cached, 6);
}

TEST(PlannerTableTest, ForkForNGreaterThanOneSharesThePromptAndCopiesThePartialBlock) {
  TestHarness h(Opts(PolicyKind::kDecodeFirst, 64), {64});
  h.AddSimple(10, 3, 0, /*n=*/3);
  // Sample 0 computes the prompt; samples 1 and 2 fork from it in the same step and
  // sample their first token from its logits. Blocks 0,1 are shared; the partial
  // block 2 (tokens 8, 9) is copied for each child after the forward pass.
  ExpectSteps(h, {
                     "*1:10 *1.1:0 *1.2:0 c2>3 c2>4",
                     "1:1 1.1:1 1.2:1",
                     "1:1 1.1:1 1.2:1",
                     "x1 x1.1 x1.2",
                 });
  EXPECT_TRUE(h.VerifyFinished().ok());
  EXPECT_EQ(h.output(RequestId(1), 2).usage.num_completion_tokens, 9);
  EXPECT_NE(h.output(RequestId(1), 1).tokens, h.output(RequestId(1), 2).tokens);

  // Block-aligned prompt: nothing to copy.
  TestHarness g(Opts(PolicyKind::kDecodeFirst, 64), {64});
  g.AddSimple(8, 2, 0, 2);
  EXPECT_EQ(g.Step(), "*1:8 *1.1:0");
  RunToCompletion(g);
}

TEST(PlannerTableTest, PipelinedDecodeIsPlannedBeforeTheTokenReturns) {
  SchedulerOptions o = Opts(PolicyKind::kDecodeFirst, 64);
  o.max_steps_in_flight = 2;
  TestHarness h(o, {64});
  const ReplicaId r = h.replica();
  h.AddSimple(4, 4);
  EXPECT_EQ(*h.PlanAndExecute(r), "*1:4");
  EXPECT_EQ(*h.PlanAndExecute(r), "1:1");  // the worker feeds its own sampled token
  EXPECT_FALSE(h.scheduler().CanPlan(r));
  StepPlan p;
  EXPECT_THAT(h.scheduler().Plan(r, h.now(), &p), StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_TRUE(h.ApplyOldest(r).ok());
  EXPECT_EQ(*h.PlanAndExecute(r), "1:1");
  ASSERT_TRUE(h.ApplyOldest(r).ok());
  EXPECT_EQ(*h.PlanAndExecute(r), "1:1");  // 2 known + 1 pending < 4
  ASSERT_TRUE(h.ApplyOldest(r).ok());
  EXPECT_EQ(*h.PlanAndExecute(r), "");     // 3 known + 1 pending = max_tokens
  ASSERT_TRUE(h.ApplyOldest(r).ok());
  EXPECT_EQ(h.output(RequestId(1)).finish_reason, FinishReason::kLength);
  EXPECT_EQ(*h.PlanAndExecute(r), "x1");
  ASSERT_TRUE(h.ApplyOldest(r).ok());
  EXPECT_TRUE(h.VerifyFinished().ok());
  EXPECT_EQ(h.scheduler().counters().discarded_tokens_total, 0);
}

// A replica's own max_steps_in_flight (the service sets it from the workers' backend)
// overrides the scheduler's, for that replica only.
TEST(PlannerTableTest, AReplicasOwnStepsInFlightOverrideTheSchedulers) {
  SchedulerOptions o = Opts(PolicyKind::kDecodeFirst, 64);
  ASSERT_EQ(o.max_steps_in_flight, 1);
  TestHarness h(o, {});
  const ReplicaId piped = h.AddReplica(64, /*max_steps_in_flight=*/2);
  h.AddSimple(4, 4);
  EXPECT_EQ(*h.PlanAndExecute(piped), "*1:4");
  EXPECT_TRUE(h.scheduler().CanPlan(piped));
  EXPECT_EQ(*h.PlanAndExecute(piped), "1:1");
  EXPECT_FALSE(h.scheduler().CanPlan(piped));
  ASSERT_TRUE(h.ApplyOldest(piped).ok());
  EXPECT_TRUE(h.scheduler().CanPlan(piped));

  TestHarness g(o, {});
  const ReplicaId sync = g.AddReplica(64);  // the scheduler's: 1
  g.AddSimple(4, 4);
  EXPECT_EQ(*g.PlanAndExecute(sync), "*1:4");
  EXPECT_FALSE(g.scheduler().CanPlan(sync));
}

TEST(PlannerTableTest, PipelinedSequenceThatStopsHasItsExtraTokenDiscarded) {
  SchedulerOptions o = Opts(PolicyKind::kDecodeFirst, 64);
  o.max_steps_in_flight = 2;
  TestHarness h(o, {64});
  const ReplicaId r = h.replica();
  // A prompt whose 2nd output token differs from its 1st; make the 2nd a stop token.
  RequestSpec spec;
  spec.stopping.max_tokens = 10;
  spec.stopping.ignore_eos = true;
  spec.sampling.seed = 7;
  for (int first = 1;; ++first) {
    spec.prompt_token_ids = {first, first + 1, first + 2};
    ReferenceOutput ref = h.model().Reference(spec.prompt_token_ids, 7, 0, spec.stopping, nullptr);
    if (ref.tokens[0] != ref.tokens[1]) {
      spec.stopping.stop_token_ids = {ref.tokens[1]};
      break;
    }
  }
  ASSERT_TRUE(h.Add(spec).ok());
  EXPECT_EQ(*h.PlanAndExecute(r), "*1:3");
  EXPECT_EQ(*h.PlanAndExecute(r), "1:1");
  ASSERT_TRUE(h.ApplyOldest(r).ok());       // token 0
  EXPECT_EQ(*h.PlanAndExecute(r), "1:1");   // planned before token 1 is known
  ASSERT_TRUE(h.ApplyOldest(r).ok());       // token 1: the stop token
  EXPECT_EQ(h.output(RequestId(1)).finish_reason, FinishReason::kStopToken);
  EXPECT_EQ(h.scheduler().Metrics().kv_blocks_used, 0);  // freed at once
  EXPECT_EQ(*h.PlanAndExecute(r), "x1");    // while step 3 is still in flight
  ASSERT_TRUE(h.ApplyOldest(r).ok());       // step 3: its token is discarded
  ASSERT_TRUE(h.ApplyOldest(r).ok());
  EXPECT_EQ(h.scheduler().counters().discarded_tokens_total, 1);
  EXPECT_EQ(h.output(RequestId(1)).tokens.size(), 2u);
  EXPECT_TRUE(h.VerifyFinished().ok());
}

TEST(PlannerTableTest, CancelFreesBlocksAtOnceAndTellsTheWorkerNextPlan) {
  SchedulerOptions o = Opts(PolicyKind::kDecodeFirst, 64);
  o.max_num_seqs = 1;
  TestHarness h(o, {64});
  const RequestId r1 = h.AddSimple(8, 20);
  const RequestId r2 = h.AddSimple(8, 20, 0, 1, 100);  // waits: max_num_seqs 1
  ExpectSteps(h, {"*1:8", "1:1"});
  ASSERT_TRUE(h.scheduler().AbortRequest(r1, FinishReason::kCancelled, h.now()).ok());
  ASSERT_TRUE(h.scheduler().AbortRequest(r2, FinishReason::kCancelled, h.now()).ok());
  EXPECT_EQ(h.scheduler().Metrics().kv_blocks_used, 0);
  EXPECT_EQ(h.scheduler().AbortRequest(r1, FinishReason::kCancelled, h.now()).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(h.scheduler().AbortRequest(r2, FinishReason::kLength, h.now()).code(),
            absl::StatusCode::kInvalidArgument);
  ExpectSteps(h, {"x1", ""});  // R2 never reached the worker: nothing to drop
  ASSERT_TRUE(h.Collect().ok());
  EXPECT_EQ(h.output(r1).finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(h.output(r1).tokens.size(), 2u);
  EXPECT_TRUE(h.output(r2).request_finished);
  EXPECT_TRUE(h.VerifyFinished().ok());
}

TEST(PlannerTableTest, DeadlineFinishesQueuedAndRunningRequests) {
  SchedulerOptions o = Opts(PolicyKind::kDecodeFirst, 64);
  o.max_num_seqs = 1;
  TestHarness h(o, {64});
  RequestSpec spec;
  spec.prompt_token_ids = {1, 2, 3, 4, 5, 6, 7, 8};
  spec.stopping.max_tokens = 50;
  spec.stopping.ignore_eos = true;
  spec.deadline = h.now() + absl::Seconds(5);
  ASSERT_TRUE(h.Add(spec).ok());
  spec.deadline = h.now() + absl::Seconds(3);
  ASSERT_TRUE(h.Add(spec).ok());  // queued behind R1 (max_num_seqs 1)
  ExpectSteps(h, {"*1:8", "1:1"});
  h.Advance(absl::Seconds(10));
  EXPECT_EQ(h.Step(), "x1");
  EXPECT_EQ(h.output(RequestId(1)).finish_reason, FinishReason::kDeadline);
  EXPECT_EQ(h.output(RequestId(2)).finish_reason, FinishReason::kDeadline);
  EXPECT_TRUE(h.output(RequestId(2)).tokens.empty());
  EXPECT_EQ(h.scheduler().num_unfinished_requests(), 0);
}

TEST(PlannerTableTest, StopStringEndsTheTextBeforeTheMatch) {
  TestHarness h(Opts(PolicyKind::kDecodeFirst, 64), {256});
  FakeTokenText text;
  RequestSpec spec;
  spec.stopping.max_tokens = 60;
  spec.stopping.ignore_eos = true;
  spec.stopping.stop_strings = {"ab", "\xC3\xA9"};
  spec.sampling.seed = 11;
  int found = 0;
  for (int first = 1; found < 3 && first < 400; ++first) {
    spec.prompt_token_ids = {first, 2, 3};
    ReferenceOutput ref = h.model().Reference(spec.prompt_token_ids, 11, 0, spec.stopping, &text);
    if (ref.finish_reason != FinishReason::kStopString) continue;
    ASSERT_TRUE(h.Add(spec).ok());
    ++found;
  }
  ASSERT_EQ(found, 3);
  RunToCompletion(h);
  for (int id = 1; id <= 3; ++id) {
    EXPECT_EQ(h.output(RequestId(id)).finish_reason, FinishReason::kStopString);
    EXPECT_EQ(h.output(RequestId(id)).text.find("ab"), std::string::npos);
  }
}

// The request contract's rules are request_spec_test's; here, what only the core's state
// decides (every other refusal happens in ValidateRequest, before AddRequest).
TEST(SchedulerAdmissionTest, BadRequestsAreRejectedWithStatus) {
  SchedulerOptions o = Opts(PolicyKind::kDecodeFirst, 64);
  o.limits.max_model_len = 64;
  o.max_waiting = 2;
  TestHarness h(o, {4}, /*text=*/false);  // 4 blocks × 4 tokens
  RequestSpec ok;
  ok.prompt_token_ids = {1, 2, 3};
  ok.stopping.max_tokens = 4;
  auto code = [&](RequestSpec s) { return h.Add(s).status().code(); };
  RequestSpec s = ok;
  s.stopping.max_tokens = 62;  // 3 + 62 > 64: the contract
  EXPECT_EQ(code(s), absl::StatusCode::kInvalidArgument);
  s = ok;
  s.stopping.max_tokens = 20;  // fits the context, never the 16-token replica
  EXPECT_EQ(code(s), absl::StatusCode::kInvalidArgument);
  s = ok;
  s.stopping.stop_strings = {"x"};  // no tokenizer
  EXPECT_EQ(code(s), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(ok), absl::StatusCode::kOk);
  EXPECT_EQ(code(ok), absl::StatusCode::kOk);
  EXPECT_EQ(code(ok), absl::StatusCode::kResourceExhausted);  // queue bound 2

  auto empty = Scheduler::Create(h.scheduler().options(), nullptr);
  ASSERT_TRUE(empty.ok());
  absl::StatusOr<ValidRequest> valid = ValidateRequest(ok, h.scheduler().options().limits);
  ASSERT_TRUE(valid.ok());
  EXPECT_THAT((*empty)->AddRequest(*valid, h.now()).status(),
              StatusIs(absl::StatusCode::kUnavailable));
  ReplicaOptions bad;
  bad.num_blocks = 8;
  bad.block_size = 8;  // differs from the scheduler's
  EXPECT_THAT((*empty)->AddReplica(bad).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

// n is capped once (RequestLimits::max_n); a cap above what one replica runs at once is a
// configuration error, so no request is refused with a limit other than the one it sees.
TEST(SchedulerAdmissionTest, TheNCapIsAtMostMaxNumSeqs) {
  SchedulerOptions o = Opts(PolicyKind::kDecodeFirst, 64);
  o.limits.vocab_size = 64;
  o.max_num_seqs = 8;
  o.limits.max_n = 9;
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
  o.limits.max_n = 8;
  EXPECT_TRUE(o.Validate().ok());
}

TEST(SchedulerResultsTest, ResultsMustMatchThePlan) {
  TestHarness h(Opts(PolicyKind::kDecodeFirst, 64), {64});
  const ReplicaId r = h.replica();
  h.AddSimple(4, 4);
  StepPlan plan;
  ASSERT_TRUE(h.scheduler().Plan(r, h.now(), &plan).ok());
  ASSERT_EQ(plan.num_sampled(), 1);
  const StepToken good{SequenceRef::FromSeqId(plan.new_sequences(0).seq_id()), 5};
  const StepToken wrong{SequenceRef{RequestId(99), 0}, 5};
  Scheduler& s = h.scheduler();
  EXPECT_EQ(s.ApplyResults(r, StepId(2), {good}, h.now()).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.ApplyResults(r, StepId(plan.step_id()), {}, h.now()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ApplyResults(r, StepId(plan.step_id()), {wrong}, h.now()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ApplyResults(ReplicaId(42), StepId(plan.step_id()), {good}, h.now()).code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(s.ApplyResults(r, StepId(plan.step_id()), {good}, h.now()).ok());
  EXPECT_TRUE(s.CheckInvariants().ok());
}

// A step that failed on its worker ends the requests in it (kError, blocks freed, no
// token invented for them) and nothing else: a request that joined in the next step,
// already in flight, is served to the end with the right tokens.
TEST(SchedulerResultsTest, AFailedStepEndsItsRequestsAndOnlyThem) {
  SchedulerOptions o = Opts(PolicyKind::kDecodeFirst, 64);
  o.max_steps_in_flight = 2;
  TestHarness h(o, {64});
  const ReplicaId r = h.replica();
  const RequestId r1 = h.AddSimple(4, 6);
  EXPECT_EQ(*h.PlanAndExecute(r), "*1:4");
  const RequestId r2 = h.AddSimple(4, 6, 0, 1, /*first_token=*/30);
  EXPECT_EQ(*h.PlanAndExecute(r), "*2:4 1:1");
  Scheduler& s = h.scheduler();
  EXPECT_EQ(s.FailStep(r, StepId(h.last_plan().step_id()), h.now()).status().code(),
            absl::StatusCode::kFailedPrecondition)
      << "only the oldest step in flight can fail";
  absl::StatusOr<int> ended = h.FailOldest(r);
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(*ended, 1);
  EXPECT_EQ(h.output(r1).finish_reason, FinishReason::kError);
  EXPECT_TRUE(h.output(r1).tokens.empty()) << "no result was invented for the failed step";
  EXPECT_FALSE(h.output(r2).request_finished);
  EXPECT_TRUE(s.CheckInvariants().ok());
  ASSERT_TRUE(h.ApplyOldest(r).ok());  // step 2: r1's token is discarded, r2 goes on
  for (int i = 0; i < 20 && !h.output(r2).request_finished; ++i) h.Step();
  EXPECT_EQ(h.output(r2).finish_reason, FinishReason::kLength);
  EXPECT_EQ(h.output(r2).tokens.size(), 6u);
  EXPECT_EQ(s.Metrics().kv_blocks_used, 0);
  EXPECT_TRUE(h.VerifyFinished().ok());
  EXPECT_TRUE(h.VerifyAllFinishedOnce().ok());
}

TEST(SchedulerReplicaTest, RoutingPrefersPrefixHitThenFreeBlocks) {
  TestHarness h(Opts(PolicyKind::kDecodeFirst, 64), {64, 64});
  h.AddSimple(16, 2);             // both empty: lowest id
  h.AddSimple(16, 2, 0, 1, 100);  // replica 1 has queued demand: goes to replica 2
  EXPECT_EQ(h.Step(0), "*1:16");
  EXPECT_EQ(h.Step(1), "*2:16");
  for (int i = 0; i < 4; ++i) {
    h.Step(0);
    h.Step(1);
  }
  ASSERT_EQ(h.scheduler().num_unfinished_requests(), 0);
  h.AddSimple(20, 2, 0, 1, 100);  // shares R2's prefix: replica 2 although equal load
  EXPECT_EQ(h.Step(0), "");
  EXPECT_EQ(h.Step(1), "*3:4");   // 16 tokens from the prefix cache
}

TEST(SchedulerReplicaTest, RemovedReplicaRequeuesItsRequestsForRecompute) {
  SchedulerOptions o = Opts(PolicyKind::kDecodeFirst, 64);
  o.max_retries = 1;
  TestHarness h(o, {64, 64});
  h.AddSimple(8, 6);
  h.AddSimple(8, 6, 0, 1, 100);
  EXPECT_EQ(h.Step(0), "*1:8");
  EXPECT_EQ(h.Step(1), "*2:8");
  EXPECT_EQ(h.Step(0), "1:1");
  ASSERT_TRUE(h.RemoveReplica(h.replica(0)).ok());  // R1 had 2 tokens
  EXPECT_EQ(h.Step(0), "*1:10 2:1");              // recompute prompt + 2 outputs
  EXPECT_TRUE(h.last_plan().new_sequences(0).resumed());
  h.AddSimple(8, 6, 0, 1, 300);
  EXPECT_EQ(h.Step(0), "*3:8 1:1 2:1");
  ASSERT_TRUE(h.RemoveReplica(h.replica(0)).ok());  // no replica left
  ASSERT_TRUE(h.Collect().ok());
  for (int id = 1; id <= 3; ++id) {
    EXPECT_EQ(h.output(RequestId(id)).finish_reason, FinishReason::kUnavailable) << id;
  }
  EXPECT_EQ(h.output(RequestId(1)).usage.num_retries, 2);
  EXPECT_TRUE(h.VerifyFinished().ok());
  EXPECT_EQ(h.scheduler().num_unfinished_requests(), 0);
  EXPECT_TRUE(h.scheduler().CheckInvariants().ok());
}

// generate.proto: the end-of-sequence token is not returned. It ends the sequence
// (STOP) without appearing in its tokens or in usage.completion_tokens.
TEST(SchedulerResultsTest, EosEndsTheSequenceWithoutBeingReturned) {
  TestHarness h(Opts(PolicyKind::kDecodeFirst, 64), {64});
  RequestSpec spec;
  spec.prompt_token_ids = {5, 6, 7};
  spec.stopping.max_tokens = 200;
  // A seed whose reference run ends with EOS after a few tokens (deterministic search).
  for (uint64_t seed = 1;; ++seed) {
    const ReferenceOutput ref = h.model().Reference(spec.prompt_token_ids, seed, 0,
                                                    spec.stopping, nullptr);
    if (ref.finish_reason == FinishReason::kStopEos && ref.tokens.size() >= 2) {
      spec.sampling.seed = seed;
      break;
    }
  }
  ASSERT_TRUE(h.Add(spec).ok());
  RunToCompletion(h);
  const CollectedOutput& out = h.output(RequestId(1));
  EXPECT_EQ(out.finish_reason, FinishReason::kStopEos);
  EXPECT_THAT(out.tokens, ::testing::Not(::testing::Contains(TestHarness::kEos)));
  EXPECT_EQ(out.usage.num_completion_tokens, static_cast<int32_t>(out.tokens.size()));
}

TEST(SchedulerMetricsTest, CountersAndUsage) {
  TestHarness h(Opts(PolicyKind::kDecodeFirst, 64), {64});
  h.AddSimple(8, 3);
  h.Step();
  h.Advance(absl::Milliseconds(20));
  h.Step();
  h.Step();
  SchedulerMetrics m = h.scheduler().Metrics();
  EXPECT_EQ(m.counters.steps_total, 3);
  EXPECT_EQ(m.counters.requests_finished_total, 1);
  EXPECT_EQ(m.kv_blocks_total, 64);
  const CollectedOutput& out = h.output(RequestId(1));
  ASSERT_TRUE(out.request_finished);
  EXPECT_EQ(out.usage.num_prompt_tokens, 8);
  EXPECT_EQ(out.usage.num_completion_tokens, 3);
  EXPECT_EQ(out.usage.first_token_time, out.usage.arrival_time);
  EXPECT_EQ(out.usage.finish_time - out.usage.arrival_time, absl::Milliseconds(20));
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// KV waste accounting: each running sequence holds whole blocks; only its last partial
// block is unused.
TEST(SchedulerMetricsTest, OccupancyCountsSlotsHeldAgainstTokensStored) {
  TestHarness h(Opts(PolicyKind::kDecodeFirst, 64), {64});
  const int32_t bs = h.scheduler().options().block_size;
  h.AddSimple(bs + 2, 50);       // prompt fills one block and 2 slots of a second
  h.AddSimple(2 * bs, 50);       // exactly two blocks
  h.Step();                      // both prefilled, one token sampled each
  KvOccupancy o = h.scheduler().Occupancy();
  // Slots: whole blocks per sequence. Tokens stored: those with a slot (a sampled token
  // gets its slot when the next step computes it).
  EXPECT_EQ(o.slots, 2 * bs + 2 * bs);
  EXPECT_EQ(o.tokens, (bs + 3) + 2 * bs);
  h.Step();  // the sampled tokens are computed: the second sequence takes a third block
  o = h.scheduler().Occupancy();
  EXPECT_EQ(o.slots, 2 * bs + 3 * bs);
  EXPECT_EQ(o.tokens, (bs + 4) + (2 * bs + 2));  // each has sampled 2 tokens
  EXPECT_LE(o.slots - o.tokens, 2 * (bs - 1));  // at most one partial block each
}

}  // namespace
}  // namespace weft

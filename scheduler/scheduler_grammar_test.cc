// Structured output in the scheduler core, with a fake grammar (the real one is
// XGrammar, scheduler/grammar/grammar_engine_test.cc): masks travel in the plan only for
// constrained samples, a constrained sequence is never pipelined, its grammar sees every
// token in order, a refused token ends it kError, and a request's tokens depend on its
// seed alone whatever else runs (same seed, same tokens).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "scheduler/grammar/testing/fill_gate.h"
#include "gtest/gtest.h"
#include "scheduler/grammar/sequence_grammar.h"
#include "scheduler/testing/harness.h"

namespace weft {
namespace {

constexpr int32_t kVocab = TestHarness::kVocab;
constexpr int32_t kEos = TestHarness::kEos;

// Output position i allows tokens t with t % kPeriod == (i + 1) % kPeriod (no EOS) for
// `length` positions; then only EOS. Accept() checks exactly that.
class StripeGrammar : public SequenceGrammar {
 public:
  static constexpr int32_t kPeriod = 4;
  explicit StripeGrammar(int32_t length, std::vector<int32_t>* log) : length_(length), log_(log) {}
  bool Allows(int32_t t) const {
    if (pos_ >= length_) return t == kEos;
    return t != kEos && t % kPeriod == (pos_ + 1) % kPeriod;
  }
  absl::Status Accept(int32_t token) override {
    if (!Allows(token)) return absl::FailedPreconditionError("not allowed");
    if (log_) log_->push_back(token);
    ++pos_;
    return absl::OkStatus();
  }
  bool FillNextTokenBitmask(uint32_t* words) override {
    for (int32_t w = 0; w < (kVocab + 31) / 32; ++w) words[w] = 0;
    for (int32_t t = 0; t < kVocab; ++t) {
      if (Allows(t)) words[t / 32] |= 1u << (t % 32);
    }
    return true;
  }
  int32_t vocab_size() const override { return kVocab; }

 private:
  const int32_t length_;
  int32_t pos_ = 0;
  std::vector<int32_t>* log_;
};

class StripeFactory : public SequenceGrammarFactory {
 public:
  explicit StripeFactory(int32_t length, std::vector<int32_t>* log = nullptr)
      : length_(length), log_(log) {}
  std::unique_ptr<SequenceGrammar> NewSequence() const override {
    return std::make_unique<StripeGrammar>(length_, log_);
  }

 private:
  int32_t length_;
  std::vector<int32_t>* log_;
};

SchedulerOptions Options(int32_t steps_in_flight = 1) {
  SchedulerOptions o;
  o.block_size = 4;
  o.max_num_batched_tokens = 64;
  o.max_num_seqs = 32;
  o.max_steps_in_flight = steps_in_flight;
  o.limits.vocab_size = kVocab;
  o.limits.max_model_len = 128;
  o.limits.max_tokens = 64;
  return o;
}

RequestSpec Spec(int32_t prompt_len, int32_t max_tokens, uint64_t seed, bool constrained) {
  RequestSpec s;
  for (int32_t i = 0; i < prompt_len; ++i) s.prompt_token_ids.push_back(10 + i % 40);
  s.stopping.max_tokens = max_tokens;
  s.sampling.seed = seed;
  if (constrained) {
    s.constraint = GrammarConstraint{};
    s.constraint->kind = GrammarConstraint::Kind::kRegex;
    s.constraint->source = "(fake)";
  }
  return s;
}

TEST(SchedulerGrammarTest, MasksTravelOnlyForConstrainedSamplesAndTheGrammarEnds) {
  TestHarness h(Options(), {64});
  std::vector<int32_t> log;
  auto grammar = std::make_shared<StripeFactory>(5, &log);
  auto c = h.Add(Spec(6, 20, 1, true), grammar);
  ASSERT_TRUE(c.ok()) << c.status();
  auto f = h.Add(Spec(6, 8, 2, false));
  ASSERT_TRUE(f.ok());
  for (int i = 0; i < 30 && h.scheduler().num_unfinished_requests() > 0; ++i) {
    h.Step();
    for (const auto& n : h.last_plan().new_sequences()) {
      const bool constrained = SequenceRef::FromSeqId(n.seq_id()).request_id == *c;
      EXPECT_EQ(!n.allowed_tokens().empty(), constrained && n.do_sample());
    }
    for (const auto& e : h.last_plan().cached_sequences()) {
      const bool constrained = SequenceRef::FromSeqId(e.seq_id()).request_id == *c;
      EXPECT_EQ(!e.allowed_tokens().empty(), constrained && e.do_sample());
      if (constrained && e.do_sample()) {
        EXPECT_EQ(e.allowed_tokens().size(), 8u);  // 64 bits
      }
    }
    ASSERT_TRUE(h.Collect().ok());
  }
  const CollectedOutput& out = h.output(*c);
  // Five grammar tokens, then EOS (not returned): finished by the grammar, not length.
  EXPECT_EQ(out.finish_reason, FinishReason::kStopEos);
  ASSERT_EQ(out.tokens.size(), 5u);
  // The grammar saw every token in order, the ending EOS too.
  std::vector<int32_t> accepted = out.tokens;
  accepted.push_back(kEos);
  EXPECT_EQ(log, accepted);
  for (size_t i = 0; i < out.tokens.size(); ++i) {
    EXPECT_EQ(out.tokens[i] % StripeGrammar::kPeriod, static_cast<int32_t>(i + 1) % 4);
  }
  EXPECT_EQ(h.scheduler().counters().grammar_violations_total, 0);
  EXPECT_GE(h.scheduler().counters().grammar_masks_total, 6);
  EXPECT_TRUE(h.VerifyFinished().ok()) << h.VerifyFinished();  // the free one
}

TEST(SchedulerGrammarTest, AConstrainedSequenceIsNeverPipelined) {
  TestHarness h(Options(/*steps_in_flight=*/2), {64});
  auto c = h.Add(Spec(3, 10, 1, true), std::make_shared<StripeFactory>(8));
  auto f = h.Add(Spec(3, 10, 2, false));
  ASSERT_TRUE(c.ok() && f.ok());
  // Prefill both (one step, sampled), then plan again before applying: the free request
  // decodes in the second step (pipelined); the constrained one waits for its token.
  ASSERT_TRUE(h.PlanAndExecute(h.replica()).ok());
  auto second = h.PlanAndExecute(h.replica());
  ASSERT_TRUE(second.ok());
  bool free_in_second = false;
  for (const auto& e : h.last_plan().cached_sequences()) {
    const RequestId r = SequenceRef::FromSeqId(e.seq_id()).request_id;
    EXPECT_NE(r, *c) << "constrained sequence planned with its token in flight";
    free_in_second |= r == *f;
  }
  EXPECT_TRUE(free_in_second) << *second;
  ASSERT_TRUE(h.ApplyOldest(h.replica()).ok());
  // Its token is back: the next plan schedules it, with a mask.
  ASSERT_TRUE(h.PlanAndExecute(h.replica()).ok());
  bool constrained_in_third = false;
  for (const auto& e : h.last_plan().cached_sequences()) {
    if (SequenceRef::FromSeqId(e.seq_id()).request_id == *c) {
      constrained_in_third = true;
      EXPECT_FALSE(e.allowed_tokens().empty());
    }
  }
  EXPECT_TRUE(constrained_in_third);
}

TEST(SchedulerGrammarTest, AConstraintNeedsItsGrammarAndARefusedTokenIsAnError) {
  TestHarness h(Options(), {64});
  EXPECT_EQ(h.Add(Spec(3, 5, 1, true)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(h.Add(Spec(3, 5, 1, false), std::make_shared<StripeFactory>(3)).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto c = h.Add(Spec(3, 5, 1, true), std::make_shared<StripeFactory>(3));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(h.PlanAndExecute(h.replica()).ok());
  // A worker that ignored the mask: EOS is not allowed at position 0.
  std::vector<StepToken> wrong = {StepToken{SequenceRef{*c, 0}, kEos}};
  const StepId step = StepId(h.last_plan().step_id());
  ASSERT_TRUE(h.scheduler().ApplyResults(h.replica(), step, wrong, h.now()).ok());
  ASSERT_TRUE(h.Collect().ok());
  EXPECT_EQ(h.output(*c).finish_reason, FinishReason::kError);
  EXPECT_TRUE(h.output(*c).tokens.empty());
  EXPECT_EQ(h.scheduler().counters().grammar_violations_total, 1);
  EXPECT_TRUE(h.scheduler().CheckInvariants().ok());
}

// Output position 0 allows only `token`, then only EOS.
class OneTokenGrammar : public SequenceGrammar {
 public:
  explicit OneTokenGrammar(int32_t token) : token_(token) {}
  absl::Status Accept(int32_t t) override {
    if (t != (done_ ? kEos : token_)) return absl::FailedPreconditionError("not allowed");
    done_ = true;
    return absl::OkStatus();
  }
  bool FillNextTokenBitmask(uint32_t* words) override {
    for (int32_t w = 0; w < (kVocab + 31) / 32; ++w) words[w] = 0;
    const int32_t t = done_ ? kEos : token_;
    words[t / 32] |= 1u << (t % 32);
    return true;
  }
  int32_t vocab_size() const override { return kVocab; }

 private:
  const int32_t token_;
  bool done_ = false;
};

class OneTokenFactory : public SequenceGrammarFactory {
 public:
  std::unique_ptr<SequenceGrammar> NewSequence() const override {
    return std::make_unique<OneTokenGrammar>(FakeTokenText::kMarkerToken);
  }
};

// A request under a tool-call grammar (a structural tag) gets the text its marker control
// token stands for (TokenTextSource::ToolCallBytes); under any other grammar the same
// token adds no text.
TEST(SchedulerGrammarTest, ToolCallGrammarTextHasTheMarkerTokensText) {
  TestHarness h(Options(), {64});
  RequestSpec tool = Spec(3, 8, 1, true);
  tool.constraint->kind = GrammarConstraint::Kind::kStructuralTag;
  auto t = h.Add(tool, std::make_shared<OneTokenFactory>());
  auto r = h.Add(Spec(3, 8, 2, true), std::make_shared<OneTokenFactory>());
  ASSERT_TRUE(t.ok() && r.ok());
  for (int i = 0; i < 10 && h.scheduler().num_unfinished_requests() > 0; ++i) {
    h.Step();
    ASSERT_TRUE(h.Collect().ok());
  }
  EXPECT_EQ(h.output(*t).tokens, std::vector<int32_t>{FakeTokenText::kMarkerToken});
  EXPECT_EQ(h.output(*t).text, "<M>");
  EXPECT_EQ(h.output(*r).tokens, std::vector<int32_t>{FakeTokenText::kMarkerToken});
  EXPECT_EQ(h.output(*r).text, "");
}

// Same seed, same tokens: a constrained request's output alone equals its output among
// 24 others (constrained and free, arriving around it, several steps in flight, a KV
// pool small enough to preempt).
// With masks filled on the planning thread (0 mask threads) or on 2 mask threads that
// the planner does not wait for (wait 0: rows whose mask is late wait a step).
class SameSeedTest : public ::testing::TestWithParam<int32_t> {};

TEST_P(SameSeedTest, SameSeedSameTokensUnderLoad) {
  auto run = [](bool loaded) {
    SchedulerOptions o = Options(/*steps_in_flight=*/2);
    o.grammar_mask_threads = GetParam();
    o.grammar_mask_wait = absl::ZeroDuration();
    TestHarness h(o, {loaded ? 24 : 64});
    auto grammar = std::make_shared<StripeFactory>(12);
    std::vector<RequestId> others;
    if (loaded) {
      for (int i = 0; i < 12; ++i) {
        const bool c = i % 2;
        others.push_back(*h.Add(Spec(5 + i % 7, 16, 100 + i, c), c ? grammar : nullptr));
      }
    }
    const RequestId target = *h.Add(Spec(9, 16, 42, true), grammar);
    if (loaded) {
      for (int i = 0; i < 12; ++i) {
        const bool c = i % 3 == 0;
        others.push_back(*h.Add(Spec(4 + i % 5, 16, 200 + i, c), c ? grammar : nullptr));
      }
    }
    for (int i = 0; i < 400 && h.scheduler().num_unfinished_requests() > 0; ++i) {
      (void)h.PlanAndExecute(h.replica());
      if (h.NumQueuedResults(h.replica()) >= 2 || i % 3 == 0) {
        while (h.NumQueuedResults(h.replica()) > 0) EXPECT_TRUE(h.ApplyOldest(h.replica()).ok());
      }
      EXPECT_TRUE(h.Collect().ok());
    }
    EXPECT_EQ(h.scheduler().num_unfinished_requests(), 0);
    EXPECT_TRUE(h.VerifyAllFinishedOnce().ok());
    EXPECT_TRUE(h.VerifyFinished().ok()) << h.VerifyFinished();
    if (loaded) {
      EXPECT_GT(h.scheduler().counters().preemptions_total, 0);
    }
    EXPECT_EQ(h.scheduler().counters().grammar_violations_total, 0);
    return h.output(target).tokens;
  };
  const std::vector<int32_t> alone = run(false);
  ASSERT_EQ(alone.size(), 12u);
  EXPECT_EQ(run(true), alone);
}

INSTANTIATE_TEST_SUITE_P(MaskThreads, SameSeedTest, ::testing::Values(0, 2));

// A fill that blocks while the test holds its gate closed ("not ready" as an event).
using Gate = ::weft::testing::FillGate;

class GatedStripe : public StripeGrammar {
 public:
  GatedStripe(int32_t length, Gate* gate) : StripeGrammar(length, nullptr), gate_(gate) {}
  bool FillNextTokenBitmask(uint32_t* words) override {
    gate_->Pass();
    return StripeGrammar::FillNextTokenBitmask(words);
  }

 private:
  Gate* gate_;
};

class GatedFactory : public SequenceGrammarFactory {
 public:
  GatedFactory(int32_t length, Gate* gate) : length_(length), gate_(gate) {}
  std::unique_ptr<SequenceGrammar> NewSequence() const override {
    return std::make_unique<GatedStripe>(length_, gate_);
  }

 private:
  int32_t length_;
  Gate* gate_;
};

bool Planned(const StepPlan& plan, RequestId r) {
  for (const auto& e : plan.cached_sequences()) {
    if (SequenceRef::FromSeqId(e.seq_id()).request_id == r) return true;
  }
  for (const auto& n : plan.new_sequences()) {
    if (SequenceRef::FromSeqId(n.seq_id()).request_id == r) return true;
  }
  return false;
}

TEST(SchedulerGrammarTest, ARowWhoseMaskIsLateWaitsAStepAndTheOthersGoOn) {
  Gate gate;
  SchedulerOptions o = Options();
  o.grammar_mask_threads = 1;
  o.grammar_mask_wait = absl::ZeroDuration();
  TestHarness h(o, {64});
  auto c = h.Add(Spec(3, 10, 1, true), std::make_shared<GatedFactory>(8, &gate));
  auto f = h.Add(Spec(3, 60, 2, false));
  ASSERT_TRUE(c.ok() && f.ok());
  auto step = [&] {
    ASSERT_TRUE(h.PlanAndExecute(h.replica()).ok());
  };
  auto apply = [&] {
    while (h.NumQueuedResults(h.replica()) > 0) ASSERT_TRUE(h.ApplyOldest(h.replica()).ok());
    ASSERT_TRUE(h.Collect().ok());
  };
  // Until the constrained sequence samples its first token (its first mask is computed
  // on the mask thread; a plan before it is ready leaves it waiting).
  for (int i = 0; i < 1000; ++i) {
    step();
    if (Planned(h.last_plan(), *c)) break;
    apply();
  }
  ASSERT_TRUE(Planned(h.last_plan(), *c));
  gate.Set(false);
  apply();  // its token comes back: the next mask's fill starts and is held at the gate
  const int64_t waits = h.scheduler().counters().grammar_mask_waits_total;
  step();
  EXPECT_FALSE(Planned(h.last_plan(), *c)) << "planned without its mask";
  EXPECT_TRUE(Planned(h.last_plan(), *f)) << "an unrelated stream stalled";
  EXPECT_EQ(h.scheduler().counters().grammar_mask_waits_total, waits + 1);
  apply();
  gate.Set(true);
  // Ready once the fill returns: a following plan takes it — at the latest the one after
  // the free stream's 60 tokens, which has nothing else to run and waits for it.
  for (int i = 0; i < 100 && !Planned(h.last_plan(), *c); ++i) {
    step();
    if (!Planned(h.last_plan(), *c)) apply();
  }
  ASSERT_TRUE(Planned(h.last_plan(), *c));
  for (const auto& e : h.last_plan().cached_sequences()) {
    if (SequenceRef::FromSeqId(e.seq_id()).request_id == *c) {
      EXPECT_EQ(e.allowed_tokens().size(), 8u);
    }
  }
}

}  // namespace
}  // namespace weft

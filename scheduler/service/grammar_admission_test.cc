#include "scheduler/service/grammar_admission.h"

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "gtest/gtest.h"
#include "scheduler/service/metrics.h"
#include "scheduler/service/response_stream.h"

namespace weft {
namespace {

// A compile the test settles by hand (Settle may run on any thread).
struct FakeCompile {
  Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  std::function<void()> on_final ABSL_GUARDED_BY(mu);
  absl::Time deadline;

  void Settle(absl::Status s) {
    std::function<void()> fn;
    {
      MutexLock l(&mu);
      done = true;
      status = std::move(s);
      fn = std::move(on_final);
    }
    if (fn) fn();
  }
};

class FakeFactory : public SequenceGrammarFactory {
 public:
  std::unique_ptr<SequenceGrammar> NewSequence() const override { return nullptr; }
};

class FakePending : public PendingGrammar {
 public:
  FakePending(std::shared_ptr<FakeCompile> c, std::shared_ptr<const FakeFactory> f)
      : c_(std::move(c)), factory_(std::move(f)) {}
  bool Poll(absl::Time now) override {
    MutexLock l(&c_->mu);
    if (!c_->done && now >= c_->deadline) {
      c_->done = true;
      c_->status = absl::InvalidArgumentError("past its deadline");
    }
    return c_->done;
  }
  absl::Time deadline() const override { return c_->deadline; }
  absl::StatusOr<std::shared_ptr<const SequenceGrammarFactory>> result() const override {
    MutexLock l(&c_->mu);
    if (!c_->status.ok()) return c_->status;
    return std::shared_ptr<const SequenceGrammarFactory>(factory_);
  }

 private:
  std::shared_ptr<FakeCompile> c_;
  std::shared_ptr<const FakeFactory> factory_;
};

class FakeService : public GrammarCompileService {
 public:
  std::unique_ptr<PendingGrammar> Compile(const GrammarConstraint& constraint,
                                          std::function<void()> on_final) override {
    auto c = std::make_shared<FakeCompile>();
    c->deadline = next_deadline;
    {
      MutexLock l(&c->mu);
      c->on_final = std::move(on_final);
    }
    compiles.push_back(c);
    sources.push_back(constraint.source);
    return std::make_unique<FakePending>(c, factory);
  }
  absl::Time next_deadline = absl::InfiniteFuture();
  std::vector<std::shared_ptr<FakeCompile>> compiles;
  std::vector<std::string> sources;
  const std::shared_ptr<const FakeFactory> factory = std::make_shared<FakeFactory>();
};

// Records how the call ended (the queue calls it when nothing is left to write).
class EndRecorder : public WriteTarget<weft::v1::GenerateResponse> {
 public:
  void WriteMessage(const weft::v1::GenerateResponse*) override {}
  void FinishCall(const absl::Status& s) override {
    ended = true;
    status = s;
  }
  void CancelCall(const absl::Status&) override {}
  bool ended = false;
  absl::Status status;
};

// The wake-ups a GrammarAdmission asked for, waited for as events.
class Wakes {
 public:
  std::function<void()> Fn() {
    return [this] {
      MutexLock l(&mu_);
      ++count_;
      cv_.SignalAll();
    };
  }
  int WaitFor(int n) {
    MutexLock l(&mu_);
    while (count_ < n) cv_.Wait(&mu_);
    return count_;
  }
  int count() {
    MutexLock l(&mu_);
    return count_;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  int count_ ABSL_GUARDED_BY(mu_) = 0;
};

struct Call {
  Submission submission;  // moved into the admission by Park
  std::shared_ptr<Outbox> outbox;
  std::shared_ptr<EndRecorder> end = std::make_shared<EndRecorder>();
};

Call MakeCall(int64_t key, std::optional<std::string> regex, std::string request_field = "") {
  RequestSpec spec;
  spec.prompt_token_ids = {1, 2, 3};
  spec.stopping.max_tokens = 8;
  if (regex) {
    GrammarConstraint c;
    c.kind = GrammarConstraint::Kind::kRegex;
    c.source = *regex;
    c.request_field = std::move(request_field);
    spec.constraint = c;
  }
  RequestLimits limits;
  limits.max_model_len = 64;
  limits.vocab_size = 100;
  auto valid = ValidateRequest(std::move(spec), limits);
  EXPECT_TRUE(valid.ok()) << valid.status();
  Call call;
  call.submission.key = key;
  call.submission.request = *std::move(valid);
  call.submission.outbox = std::make_shared<Outbox>(1 << 20);
  call.submission.outbox->Attach(call.end);
  call.outbox = call.submission.outbox;
  return call;
}

TEST(GrammarAdmissionTest, UnconstrainedIsNotTakenAndNoServiceRefuses) {
  Wakes wakes;
  FakeService service;
  GrammarAdmission admission(&service, wakes.Fn());
  Call free_text = MakeCall(1, std::nullopt);
  EXPECT_FALSE(admission.Park(free_text.submission, absl::Now()));
  EXPECT_TRUE(service.compiles.empty());

  GrammarAdmission off(nullptr, wakes.Fn());
  Call constrained = MakeCall(2, "a+");
  EXPECT_TRUE(off.Park(constrained.submission, absl::Now()));
  ASSERT_TRUE(constrained.end->ended);
  EXPECT_EQ(constrained.end->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(off.size(), 0u);
}

TEST(GrammarAdmissionTest, AFinishedCompileWakesTheLoopOnceAndIsAdmittedWithItsGrammar) {
  Wakes wakes;
  FakeService service;
  GrammarAdmission admission(&service, wakes.Fn());
  Call a = MakeCall(1, "a+"), b = MakeCall(2, "b+");
  ASSERT_TRUE(admission.Park(a.submission, absl::Now()));
  ASSERT_TRUE(admission.Park(b.submission, absl::Now()));
  EXPECT_EQ(service.sources, (std::vector<std::string>{"a+", "b+"}));
  EXPECT_EQ(admission.NextDeadline(), absl::InfiniteFuture());

  std::vector<int64_t> admitted;
  auto admit = [&](Submission& s, std::shared_ptr<const SequenceGrammarFactory> g) {
    EXPECT_EQ(g, service.factory);
    admitted.push_back(s.key);
  };
  admission.Poll(absl::Now(), admit);  // nothing final yet
  EXPECT_TRUE(admitted.empty());
  EXPECT_EQ(admission.size(), 2u);

  // The second compile finishes on another thread: one wake-up, then Poll admits it.
  std::thread compile([&] { service.compiles[1]->Settle(absl::OkStatus()); });
  EXPECT_EQ(wakes.WaitFor(1), 1);
  compile.join();
  admission.Poll(absl::Now(), admit);
  EXPECT_EQ(admitted, std::vector<int64_t>{2});
  EXPECT_EQ(admission.size(), 1u);
  EXPECT_FALSE(b.end->ended);  // admitted: the core ends it later

  // The first is refused: its call ends with the compile's status.
  service.compiles[0]->Settle(absl::InvalidArgumentError("regex: does not compile: x"));
  EXPECT_EQ(wakes.count(), 2);
  admission.Poll(absl::Now(), admit);
  EXPECT_EQ(admitted, std::vector<int64_t>{2});
  ASSERT_TRUE(a.end->ended);
  // The engine's message, prefixed with the constraint's field (an edge names its own).
  EXPECT_EQ(a.end->status.message(), "constraint.regex: regex: does not compile: x");
  EXPECT_EQ(admission.size(), 0u);
}

// A constraint an edge built from other fields (chat.tool_choice's structural tag) is
// refused naming that field, not a constraint field the client never set.
TEST(GrammarAdmissionTest, ARefusalNamesTheFieldTheConstraintCameFrom) {
  Wakes wakes;
  FakeService service;
  GrammarAdmission admission(&service, wakes.Fn());
  Call a = MakeCall(1, "a+", "chat.tools");
  ASSERT_TRUE(admission.Park(a.submission, absl::Now()));
  service.compiles[0]->Settle(absl::InvalidArgumentError("does not compile: x"));
  admission.Poll(absl::Now(), [](Submission&, std::shared_ptr<const SequenceGrammarFactory>) {
    ADD_FAILURE() << "a refused compile was admitted";
  });
  ASSERT_TRUE(a.end->ended);
  EXPECT_EQ(a.end->status.message(), "chat.tools: does not compile: x");
}

TEST(GrammarAdmissionTest, TheLoopWakesAtTheEarliestDeadlineAndRefusesThen) {
  Wakes wakes;
  FakeService service;
  GrammarAdmission admission(&service, wakes.Fn());
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  service.next_deadline = t0 + absl::Seconds(10);
  Call a = MakeCall(1, "a+");
  ASSERT_TRUE(admission.Park(a.submission, t0));
  service.next_deadline = t0 + absl::Seconds(5);
  Call b = MakeCall(2, "b+");
  ASSERT_TRUE(admission.Park(b.submission, t0));
  EXPECT_EQ(admission.NextDeadline(), t0 + absl::Seconds(5));

  auto admit = [&](Submission&, std::shared_ptr<const SequenceGrammarFactory>) {
    ADD_FAILURE() << "nothing compiled";
  };
  admission.Poll(t0 + absl::Seconds(5), admit);
  ASSERT_TRUE(b.end->ended);
  EXPECT_EQ(b.end->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(a.end->ended);
  EXPECT_EQ(admission.NextDeadline(), t0 + absl::Seconds(10));
  EXPECT_EQ(wakes.count(), 0);  // deadlines are the loop's own timer, not a wake-up
}

TEST(GrammarAdmissionTest, ACallWhoseClientLeftIsDroppedUnanswered) {
  Wakes wakes;
  FakeService service;
  GrammarAdmission admission(&service, wakes.Fn());
  Call a = MakeCall(1, "a+");
  ASSERT_TRUE(admission.Park(a.submission, absl::Now()));
  a.outbox->Abort(absl::CancelledError("client left"));
  service.compiles[0]->Settle(absl::OkStatus());
  admission.Poll(absl::Now(), [&](Submission&, std::shared_ptr<const SequenceGrammarFactory>) {
    ADD_FAILURE() << "admitted a call whose client left";
  });
  EXPECT_EQ(admission.size(), 0u);
}

TEST(GrammarAdmissionTest, EndAllEndsEveryCallAndNoWakeFollows) {
  Wakes wakes;
  FakeService service;
  auto admission = std::make_unique<GrammarAdmission>(&service, wakes.Fn());
  Call a = MakeCall(1, "a+"), b = MakeCall(2, "b+");
  ASSERT_TRUE(admission->Park(a.submission, absl::Now()));
  ASSERT_TRUE(admission->Park(b.submission, absl::Now()));
  admission->EndAll(absl::UnavailableError("scheduler stopping"));
  for (Call* c : {&a, &b}) {
    ASSERT_TRUE(c->end->ended);
    EXPECT_EQ(c->end->status.code(), absl::StatusCode::kUnavailable);
  }
  service.compiles[0]->Settle(absl::OkStatus());  // a compile finishing afterwards
  admission.reset();
  service.compiles[1]->Settle(absl::OkStatus());  // or after its destruction
  EXPECT_EQ(wakes.count(), 0);
}

// Every call it ends is counted in weft_requests_status_total by its code, as the core
// counts those it admitted: refused (structured output off, the compile refused), the
// client gone before admission, the server stopping.
TEST(GrammarAdmissionTest, EveryCallItEndsIsCountedByItsStatus) {
  ServiceMetrics metrics;
  auto count = [&](const char* code) { return metrics.ByStatus(code).Value(); };
  Wakes wakes;
  FakeService service;
  GrammarAdmission off(nullptr, wakes.Fn(), &metrics);
  Call refused_here = MakeCall(1, "a+");
  ASSERT_TRUE(off.Park(refused_here.submission, absl::Now()));
  EXPECT_EQ(count("INVALID_ARGUMENT"), 1);

  GrammarAdmission admission(&service, wakes.Fn(), &metrics);
  Call refused = MakeCall(2, "a+"), left = MakeCall(3, "b+"), stopped = MakeCall(4, "c+");
  for (Call* c : {&refused, &left, &stopped}) ASSERT_TRUE(admission.Park(c->submission, absl::Now()));
  service.compiles[0]->Settle(absl::InvalidArgumentError("does not compile: x"));
  left.outbox->Abort(absl::CancelledError("client left"));
  admission.Poll(absl::Now(), [](Submission&, std::shared_ptr<const SequenceGrammarFactory>) {
    ADD_FAILURE() << "nothing compiled";
  });
  EXPECT_EQ(count("INVALID_ARGUMENT"), 2);
  EXPECT_EQ(count("CANCELLED"), 1);
  admission.EndAll(absl::UnavailableError("scheduler stopping"));
  EXPECT_EQ(count("UNAVAILABLE"), 1);
  EXPECT_EQ(count("OK"), 0);
}

}  // namespace
}  // namespace weft

// WorkerClient through a fake transport (AttachDialer/AttachStream): the test plays the
// scheduler on its own thread, Run() has its own, and Stop()/RequestDrain() come from
// others — no gRPC threads, so TSan sees every thread involved (tag tsan). The gRPC
// transport itself is covered by services_test, engine_test and the e2e tests.
#include "worker/service/worker_client.h"

#include <atomic>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/protocol_version.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

using ::testing::HasSubstr;
using ::weft::testing::IsOk;
using ::weft::testing::StatusIs;

constexpr absl::Duration kHangGuard = absl::Seconds(20);

// One Attach call: the worker's side is the AttachStream methods, the scheduler's side
// (the test) Send/End/WaitForMessages. Thread-safe.
class FakeCall : public AttachStream {
 public:
  bool Read(weft::v1::SchedulerMessage* m) override ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock l(&mu_);
    while (to_worker_.empty() && !ended_ && !cancelled_) cv_.Wait(&mu_);
    if (cancelled_ || to_worker_.empty()) return false;
    *m = std::move(to_worker_.front());
    to_worker_.pop_front();
    return true;
  }
  bool Write(const weft::v1::WorkerMessage& m) override ABSL_LOCKS_EXCLUDED(mu_) {
    {
      MutexLock l(&mu_);
      EXPECT_FALSE(writing_) << "two writes at once";
      if (ended_ || cancelled_ || finished_) return false;
      writing_ = true;
    }
    std::this_thread::yield();  // a write takes a while: another one would overlap here
    MutexLock l(&mu_);
    writing_ = false;
    from_worker_.push_back(m);
    cv_.SignalAll();
    return true;
  }
  absl::Status Finish() override ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock l(&mu_);
    finished_ = true;
    cv_.SignalAll();
    if (cancelled_ && !ended_) return absl::CancelledError("cancelled");
    return status_;
  }
  void Cancel() override ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock l(&mu_);
    cancelled_ = true;
    cv_.SignalAll();
  }

  // The scheduler's side.
  void Send(weft::v1::SchedulerMessage m) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock l(&mu_);
    to_worker_.push_back(std::move(m));
    cv_.SignalAll();
  }
  // Ends the call with `status` once the worker read what was sent before.
  void End(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock l(&mu_);
    ended_ = true;
    status_ = std::move(status);
    cv_.SignalAll();
  }
  // Waits (bounded) until the worker wrote `n` messages.
  bool WaitForMessages(size_t n) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock l(&mu_);
    const absl::Time give_up = absl::Now() + kHangGuard;
    while (from_worker_.size() < n && absl::Now() < give_up) {
      cv_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
    }
    return from_worker_.size() >= n;
  }
  std::vector<weft::v1::WorkerMessage> messages() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock l(&mu_);
    return from_worker_;
  }
  bool cancelled() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock l(&mu_);
    return cancelled_;
  }
  bool finished() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock l(&mu_);
    return finished_;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::deque<weft::v1::SchedulerMessage> to_worker_ ABSL_GUARDED_BY(mu_);
  std::vector<weft::v1::WorkerMessage> from_worker_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// The client's handle on a FakeCall (the test keeps the call after the client is done).
class CallRef : public AttachStream {
 public:
  explicit CallRef(std::shared_ptr<FakeCall> call) : call_(std::move(call)) {}
  bool Read(weft::v1::SchedulerMessage* m) override { return call_->Read(m); }
  bool Write(const weft::v1::WorkerMessage& m) override { return call_->Write(m); }
  absl::Status Finish() override { return call_->Finish(); }
  void Cancel() override { call_->Cancel(); }

 private:
  const std::shared_ptr<FakeCall> call_;
};

class FakeDialer : public AttachDialer {
 public:
  absl::StatusOr<std::unique_ptr<AttachStream>> Dial() override ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock l(&mu_);
    ++dials_;
    cv_.SignalAll();
    if (refuse_) return absl::UnavailableError("cannot connect");
    calls_.push_back(std::make_shared<FakeCall>());
    return std::unique_ptr<AttachStream>(new CallRef(calls_.back()));
  }
  // Waits (bounded) for the n-th call (1-based); null when it never came.
  std::shared_ptr<FakeCall> WaitForCall(size_t n) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock l(&mu_);
    const absl::Time give_up = absl::Now() + kHangGuard;
    while (calls_.size() < n && absl::Now() < give_up) {
      cv_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
    }
    return calls_.size() >= n ? calls_[n - 1] : nullptr;
  }
  bool WaitForDials(int n) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock l(&mu_);
    const absl::Time give_up = absl::Now() + kHangGuard;
    while (dials_ < n && absl::Now() < give_up) cv_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
    return dials_ >= n;
  }
  int dials() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock l(&mu_);
    return dials_;
  }
  void set_refuse(bool refuse) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock l(&mu_);
    refuse_ = refuse;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  int dials_ ABSL_GUARDED_BY(mu_) = 0;
  bool refuse_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::shared_ptr<FakeCall>> calls_ ABSL_GUARDED_BY(mu_);
};

// Answers each plan with its step id; counts what Run's thread asked of it.
class Executor : public StepExecutor {
 public:
  weft::v1::WorkerHello Hello() override {
    weft::v1::WorkerHello h;
    h.set_replica("r0");
    return h;
  }
  absl::Status OnWelcome(const weft::v1::Welcome&) override {
    ++welcomes;
    return absl::OkStatus();
  }
  weft::v1::StepResult Execute(const weft::v1::StepPlan& plan) override {
    weft::v1::StepResult r;
    r.set_step_id(plan.step_id());
    return r;
  }
  void OnDetach() override { ++detaches; }

  std::atomic<int> welcomes{0};
  std::atomic<int> detaches{0};
};

weft::v1::SchedulerMessage Welcome() {
  weft::v1::SchedulerMessage m;
  m.mutable_welcome()->set_replica("r0");
  m.mutable_welcome()->set_first_step_id(1);
  return m;
}
weft::v1::SchedulerMessage Plan(int64_t step) {
  weft::v1::SchedulerMessage m;
  m.mutable_plan()->set_step_id(step);
  return m;
}
weft::v1::SchedulerMessage DrainStatus(bool done) {
  weft::v1::SchedulerMessage m;
  m.mutable_drain_status()->set_done(done);
  return m;
}

class WorkerClientTest : public ::testing::Test {
 protected:
  WorkerClientTest() {
    WorkerClientOptions o;
    o.scheduler_address = "fake:1";
    o.initial_backoff = absl::Milliseconds(1);
    o.max_backoff = absl::Milliseconds(2);
    auto dialer = std::make_unique<FakeDialer>();
    dialer_ = dialer.get();
    client_ = std::make_unique<WorkerClient>(o, &executor_, std::move(dialer));
  }
  ~WorkerClientTest() override {
    client_->Stop();
    if (run_.joinable()) run_.join();
  }
  void StartRun() {
    run_ = std::thread([this] { run_status_ = client_->Run(); });
  }
  absl::Status JoinRun() {
    run_.join();
    return run_status_;
  }
  // The n-th call, welcomed, with its hello read.
  std::shared_ptr<FakeCall> Attached(size_t n) {
    std::shared_ptr<FakeCall> call = dialer_->WaitForCall(n);
    if (call == nullptr) return nullptr;
    EXPECT_TRUE(call->WaitForMessages(1));
    EXPECT_TRUE(call->messages()[0].has_hello());
    // Every hello carries the wire's protocol version, whatever the executor said.
    EXPECT_EQ(call->messages()[0].hello().protocol_version(), kWorkerProtocolVersion);
    call->Send(Welcome());
    return call;
  }

  Executor executor_;
  FakeDialer* dialer_ = nullptr;
  std::unique_ptr<WorkerClient> client_;
  std::thread run_;
  absl::Status run_status_;
};

TEST_F(WorkerClientTest, AnswersPlansInOrderAndStopEndsACallBlockedInRead) {
  StartRun();
  std::shared_ptr<FakeCall> call = Attached(1);
  ASSERT_NE(call, nullptr);
  for (int64_t step = 1; step <= 3; ++step) call->Send(Plan(step));
  ASSERT_TRUE(call->WaitForMessages(4));
  const std::vector<weft::v1::WorkerMessage> got = call->messages();
  for (int64_t step = 1; step <= 3; ++step) EXPECT_EQ(got[step].result().step_id(), step);
  EXPECT_TRUE(client_->ready());
  EXPECT_EQ(client_->steps_executed(), 3);
  client_->Stop();  // from this thread, while Run's waits in Read
  EXPECT_THAT(JoinRun(), IsOk());
  EXPECT_TRUE(call->cancelled());
  EXPECT_TRUE(call->finished());
  EXPECT_EQ(executor_.detaches.load(), 1);
  EXPECT_EQ(dialer_->dials(), 1);
  EXPECT_FALSE(client_->attached());
}

TEST_F(WorkerClientTest, ARejectIsFinal) {
  StartRun();
  std::shared_ptr<FakeCall> call = dialer_->WaitForCall(1);
  ASSERT_NE(call, nullptr);
  ASSERT_TRUE(call->WaitForMessages(1));
  weft::v1::SchedulerMessage reject;
  reject.mutable_reject()->set_reason("model fingerprint differs");
  call->Send(reject);
  EXPECT_THAT(JoinRun(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                  HasSubstr("model fingerprint differs")));
  EXPECT_EQ(dialer_->dials(), 1);
  EXPECT_EQ(executor_.detaches.load(), 0);  // never welcomed
}

TEST_F(WorkerClientTest, DialsAgainWhenTheSchedulerEndsTheCall) {
  StartRun();
  std::shared_ptr<FakeCall> first = Attached(1);
  ASSERT_NE(first, nullptr);
  first->Send(Plan(1));
  ASSERT_TRUE(first->WaitForMessages(2));
  first->End(absl::UnavailableError("scheduler restarting"));
  std::shared_ptr<FakeCall> second = Attached(2);
  ASSERT_NE(second, nullptr);
  second->Send(Plan(1));  // a new attachment starts at the Welcome's first step
  ASSERT_TRUE(second->WaitForMessages(2));
  EXPECT_EQ(second->messages()[1].result().step_id(), 1);
  EXPECT_EQ(client_->attachments(), 2);
  EXPECT_EQ(executor_.detaches.load(), 1);  // the first attachment's state was dropped
  client_->Stop();
  EXPECT_THAT(JoinRun(), IsOk());
  EXPECT_EQ(executor_.detaches.load(), 2);
}

// A drain asked for by another thread (SIGTERM) while Run's thread answers plans: both
// write on the call (one at a time: FakeCall fails the test on two writes at once); the
// scheduler drains the replica and ends the call OK; Run returns without dialing again.
TEST_F(WorkerClientTest, RequestDrainWhileServingEndsRunWhenTheSchedulerReleasesIt) {
  constexpr int kPlans = 50;
  StartRun();
  std::shared_ptr<FakeCall> call = Attached(1);
  ASSERT_NE(call, nullptr);
  std::thread scheduler([&] {
    for (int64_t step = 1; step <= kPlans; ++step) call->Send(Plan(step));
  });
  ASSERT_TRUE(call->WaitForMessages(2));  // serving
  std::thread sigterm([&] { EXPECT_TRUE(client_->RequestDrain("test")); });
  sigterm.join();
  scheduler.join();
  EXPECT_TRUE(client_->draining());
  EXPECT_FALSE(client_->ready());
  ASSERT_TRUE(call->WaitForMessages(1 + kPlans + 1));
  int drains = 0, results = 0;
  for (const weft::v1::WorkerMessage& m : call->messages()) {
    drains += m.has_drain();
    if (m.has_result()) {
      EXPECT_EQ(m.result().step_id(), ++results);
    }
  }
  EXPECT_EQ(drains, 1);
  EXPECT_EQ(results, kPlans);
  call->Send(DrainStatus(false));
  call->Send(DrainStatus(true));
  call->End(absl::OkStatus());
  EXPECT_THAT(JoinRun(), IsOk());
  EXPECT_EQ(dialer_->dials(), 1);
}

// Waiting to dial again, Run's thread sleeps; Stop wakes it.
TEST_F(WorkerClientTest, StopDuringTheBackoffEndsRun) {
  WorkerClientOptions o;
  o.scheduler_address = "fake:1";
  o.initial_backoff = absl::Seconds(600);  // only Stop can end the wait
  o.max_backoff = absl::Seconds(600);
  auto dialer = std::make_unique<FakeDialer>();
  dialer->set_refuse(true);
  dialer_ = dialer.get();
  client_ = std::make_unique<WorkerClient>(o, &executor_, std::move(dialer));
  StartRun();
  ASSERT_TRUE(dialer_->WaitForDials(1));
  client_->Stop();
  EXPECT_THAT(JoinRun(), IsOk());
  EXPECT_EQ(dialer_->dials(), 1);
}

// SIGTERM with no call up: nothing carries the request (false) and there is nothing to
// drain: once the dial fails, Run ends instead of waiting to dial again.
TEST_F(WorkerClientTest, RequestDrainWithNoCallUpEndsRunAfterTheDial) {
  dialer_->set_refuse(true);
  EXPECT_FALSE(client_->RequestDrain("shutting down"));
  EXPECT_TRUE(client_->draining());
  StartRun();
  EXPECT_THAT(JoinRun(), IsOk());
  EXPECT_EQ(dialer_->dials(), 1);
}

}  // namespace
}  // namespace weft

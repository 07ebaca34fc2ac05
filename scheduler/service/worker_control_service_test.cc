// Loopback tests of the attach port with a fake engine: a WorkerClient attaching through
// the WorkerControl service and answering plans, re-attaching after a close, and a
// worker stream that always ends.
#include "scheduler/service/worker_control_service.h"

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "common/mutex.h"
#include "common/testing/status_matchers.h"
#include "scheduler/service/testing/fake_engine.h"
#include "worker/service/worker_client.h"

namespace weft {
namespace {

using ::weft::testing::StatusIs;
using testing::FakeEngine;

class WorkerControlServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ctl_ = std::make_unique<WorkerControlService>(&engine_);
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(ctl_.get());
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  }

  FakeEngine engine_;
  std::unique_ptr<WorkerControlService> ctl_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// The scheduler closes a worker's stream (a fence, or shutting down) while a write to it
// is in flight — the write cannot complete: the worker reads nothing and the message is
// over its window — and then the worker's side goes away (here it cancels), failing the
// write. The call must still end. Before WorkerHandle shared the Generate stream's write
// queue, its OnWriteDone dropped the pending finish: the call never ended and the
// server's Shutdown waited on it.
TEST_F(WorkerControlServiceTest, WorkerStreamClosedDuringAWriteThatFailsStillEnds) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 5);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto stub = weft::v1::WorkerControl::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext ctx;
  auto stream = stub->Attach(&ctx);
  weft::v1::WorkerMessage hello;
  hello.mutable_hello()->set_replica("r0");
  ASSERT_TRUE(stream->Write(hello));
  ASSERT_TRUE(engine_.WaitFor([&] { return engine_.worker_ != nullptr; }));
  std::shared_ptr<WorkerHandle> w;
  {
    MutexLock l(&engine_.mu_);
    w = engine_.worker_;
  }
  weft::v1::SchedulerMessage big;
  big.mutable_reject()->set_reason(std::string(1 << 20, 'x'));
  ASSERT_TRUE(w->Send(big));  // its write starts at once and stays pending
  w->Close(absl::UnavailableError("replica fenced"));
  ctx.TryCancel();
  ASSERT_TRUE(engine_.WaitFor([&] { return engine_.gone_ == 1; }));

  // Shutdown returns once every call has ended; its deadline is far beyond the wait.
  Mutex mu;
  CondVar cv;
  bool shut_down = false;
  std::thread shutdown([&] {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(600)));
    MutexLock l(&mu);
    shut_down = true;
    cv.SignalAll();
  });
  {
    MutexLock l(&mu);
    const absl::Time give_up = absl::Now() + absl::Seconds(20);  // a hang guard
    while (!shut_down && absl::Now() < give_up) cv.WaitWithTimeout(&mu, absl::Seconds(1));
  }
  if (!shut_down) {
    ADD_FAILURE() << "the cancelled worker call never ended; Shutdown is still waiting";
    shutdown.detach();
    server_.release();  // in use by the blocked Shutdown
    return;
  }
  shutdown.join();
  weft::v1::SchedulerMessage m;
  while (stream->Read(&m)) {
  }
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

class EchoExecutor : public StepExecutor {
 public:
  weft::v1::WorkerHello Hello() override {
    weft::v1::WorkerHello h;
    h.set_replica("r0");
    h.set_model_fingerprint("fp");
    return h;
  }
  absl::Status OnWelcome(const weft::v1::Welcome&) override {
    ++welcomes;
    return welcome_error;
  }
  weft::v1::StepResult Execute(const weft::v1::StepPlan& plan) override {
    weft::v1::StepResult r;
    r.set_step_id(plan.step_id());
    return r;
  }
  void OnDetach() override { ++detaches; }
  std::atomic<int> welcomes{0}, detaches{0};
  absl::Status welcome_error;  // what OnWelcome returns
};

TEST_F(WorkerControlServiceTest, WorkerAttachesRunsPlansAndReattachesAfterClose) {
  EchoExecutor exec;
  WorkerClientOptions o;
  o.scheduler_address = "127.0.0.1:" + std::to_string(port_);
  o.initial_backoff = absl::Milliseconds(50);
  WorkerClient client(o, &exec);
  std::thread t([&] { EXPECT_TRUE(client.Run().ok()); });
  ASSERT_TRUE(engine_.WaitFor([&] { return engine_.worker_ != nullptr; }));
  std::shared_ptr<WorkerHandle> w;
  {
    MutexLock l(&engine_.mu_);
    EXPECT_EQ(engine_.hello_.replica(), "r0");
    w = engine_.worker_;
  }
  weft::v1::SchedulerMessage welcome;
  welcome.mutable_welcome()->set_first_step_id(1);
  ASSERT_TRUE(w->Send(welcome));
  for (int i = 1; i <= 3; ++i) {
    weft::v1::SchedulerMessage m;
    m.mutable_plan()->set_step_id(i);
    ASSERT_TRUE(w->Send(m));
  }
  ASSERT_TRUE(engine_.WaitFor([&] { return engine_.results_.size() == 3; }));
  EXPECT_EQ(engine_.results_[2].step_id(), 3);
  // Fence: the scheduler closes the stream; the worker notices and re-attaches.
  {
    MutexLock l(&engine_.mu_);
    engine_.worker_ = nullptr;
  }
  w->Close(absl::UnavailableError("fenced"));
  ASSERT_TRUE(engine_.WaitFor([&] { return engine_.worker_ != nullptr && engine_.gone_ >= 1; }));
  EXPECT_EQ(exec.detaches.load(), 1);
  client.Stop();
  t.join();
}

TEST_F(WorkerControlServiceTest, WorkerThatCannotStartServingReattachesButARejectIsFinal) {
  // OnWelcome fails with FAILED_PRECONDITION (as JoinGroup does when a leftover segment
  // of another shape holds the group's name): the worker re-dials for a new admission;
  // only the scheduler's Reject ends Run().
  EchoExecutor exec;
  exec.welcome_error = absl::FailedPreconditionError("cannot form the tensor-parallel group");
  WorkerClientOptions o;
  o.scheduler_address = "127.0.0.1:" + std::to_string(port_);
  o.initial_backoff = absl::Milliseconds(50);
  WorkerClient client(o, &exec);
  absl::Status run_status;
  std::atomic<bool> returned{false};
  std::thread t([&] {
    run_status = client.Run();
    returned = true;
  });
  std::shared_ptr<WorkerHandle> w;
  ASSERT_TRUE(engine_.WaitFor([&] { return engine_.hellos_ == 1; }));
  {
    MutexLock l(&engine_.mu_);
    w = engine_.worker_;
  }
  weft::v1::SchedulerMessage welcome;
  welcome.mutable_welcome()->set_first_step_id(1);
  ASSERT_TRUE(w->Send(welcome));
  ASSERT_TRUE(engine_.WaitFor([&] { return engine_.hellos_ == 2; })) << "did not re-attach";
  EXPECT_EQ(exec.welcomes.load(), 1);
  EXPECT_EQ(exec.detaches.load(), 0);  // never admitted
  EXPECT_FALSE(returned.load());
  {
    MutexLock l(&engine_.mu_);
    w = engine_.worker_;
  }
  weft::v1::SchedulerMessage reject;
  reject.mutable_reject()->set_reason("model fingerprint differs");
  ASSERT_TRUE(w->Send(reject));
  w->Close(absl::FailedPreconditionError("model fingerprint differs"));
  t.join();
  EXPECT_THAT(run_status, StatusIs(absl::StatusCode::kFailedPrecondition)) << run_status;
  EXPECT_NE(run_status.message().find("fingerprint"), std::string::npos) << run_status;
  EXPECT_EQ(engine_.hellos_, 2);
}

}  // namespace
}  // namespace weft

// End to end, real processes: RELIABILITY.md's scheduler_gone. SIGKILL the scheduler in
// the middle of a generation: the client's stream ends UNAVAILABLE, the worker notices
// at once (weft_worker_attached drops to 0) and drops its state, and when a new scheduler
// comes up where the worker dials, the worker re-attaches by itself and serves it
// correctly. The new scheduler numbers steps and requests from 1 again, so a worker that
// kept stale sequence state would fail its first plan ("already held"): step errors must
// stay zero and the tokens must match the first scheduler's.
#include <signal.h>

#include "absl/strings/str_join.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "tests/e2e/process_harness.h"
#include "tests/e2e/test_prompts.h"

namespace weft::e2e {
namespace {

TEST(SchedulerGoneE2eTest, WorkersDropStateAndReattachWhenTheSchedulerReturns) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  const std::string prompt = TestPrompts()[1];
  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler().ok()) << cluster.Logs();
  WorkerSpec w;
  w.num_kv_blocks = 64;
  w.threads = 2;
  ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();

  StreamResult first = Generate(cluster.stub(), GreedyRequest(prompt, 24));
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  ASSERT_EQ(first.token_ids.size(), 24u);

  // A long generation in flight when the scheduler dies.
  BackgroundStream inflight(cluster.stub(), GreedyRequest(prompt, 900), absl::Seconds(120));
  ASSERT_TRUE(inflight.WaitTokens(3)) << CodeName(inflight.Join().status.error_code()) << " "
                                      << inflight.Join().status.error_message() << "\n"
                                      << cluster.Logs();
  ASSERT_TRUE(cluster.scheduler()->Signal(SIGKILL));
  ASSERT_TRUE(cluster.scheduler()->Wait(absl::Seconds(10)).has_value());
  StreamResult cut = inflight.Join(absl::Seconds(60));
  EXPECT_EQ(CodeName(cut.status.error_code()), "UNAVAILABLE") << cut.status.error_message();

  // The worker notices (the connection closes; keepalive would catch a silent loss).
  EXPECT_TRUE(WaitFor(
      [&] {
        auto m = cluster.WorkerMetrics("r0");
        return m.ok() && m->Get("weft_worker_attached") == 0;
      },
      absl::Seconds(60)))
      << cluster.Logs();
  EXPECT_TRUE(cluster.worker("r0")->Running());

  // A new scheduler on the same worker port: the worker attaches again by itself.
  const int worker_port = cluster.worker_port();
  ASSERT_TRUE(cluster.StartScheduler({}, worker_port).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();
  EXPECT_EQ(cluster.Health(), "SERVING");
  // Attached twice in all, and attached now.
  const absl::Status reattached = cluster.WaitWorkerAttached("r0", 2);
  EXPECT_TRUE(reattached.ok()) << reattached;

  StreamResult again = Generate(cluster.stub(), GreedyRequest(prompt, 24));
  ASSERT_TRUE(again.status.ok()) << again.status.error_message() << "\n" << cluster.Logs();
  EXPECT_EQ(absl::StrJoin(again.token_ids, " "), absl::StrJoin(first.token_ids, " "));
  auto wm = cluster.WorkerMetrics("r0");
  ASSERT_TRUE(wm.ok());
  EXPECT_EQ(wm->Get("weft_worker_step_errors_total"), 0);
  EXPECT_TRUE(WaitFor([&] { return cluster.Metric("weft_kv_blocks_used") == 0; }, absl::Seconds(30)));
}

}  // namespace
}  // namespace weft::e2e

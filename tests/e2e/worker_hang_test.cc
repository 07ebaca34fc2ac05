// End to end, real processes: RELIABILITY.md's worker_hang. Two replicas; SIGSTOP one
// worker mid-generation under a short explicit step-deadline floor. The stopped replica
// is fenced after two missed deadlines (weft_replicas_fenced_total, by reason), its
// requests are re-queued on the live replica (or end UNAVAILABLE), nothing leaks, and no
// scheduler thread is blocked meanwhile: health, ListModels and the live replica's steps
// keep going. After SIGCONT the worker finds its stream closed and re-attaches.
#include <signal.h>

#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "tests/e2e/process_harness.h"
#include "tests/e2e/test_prompts.h"

namespace weft::e2e {
namespace {

constexpr int kStreams = 8;
constexpr int kTokens = 48;

TEST(WorkerHangE2eTest, StoppedWorkerIsFencedAfterTwoMissedDeadlines) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  const std::vector<std::string>& prompts = TestPrompts();
  Cluster cluster(model);
  // Floor 2 s, k = 8: a step of a live replica takes well under a second here, so only
  // the stopped one misses its deadlines.
  ASSERT_TRUE(cluster.StartScheduler({"--step_deadline_floor_s=2", "--step_deadline_k=8"}).ok())
      << cluster.Logs();
  for (const char* r : {"r0", "r1"}) {
    WorkerSpec w;
    w.replica = r;
    w.num_kv_blocks = 96;
    w.threads = 1;
    ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  }
  ASSERT_TRUE(cluster.WaitReplicas(2).ok()) << cluster.Logs();

  // Undisturbed outputs first.
  std::vector<std::vector<int32_t>> want(kStreams);
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < kStreams; ++i) {
      threads.emplace_back([&, i] {
        want[i] = Generate(cluster.stub(), GreedyRequest(prompts[i % prompts.size()], kTokens)).token_ids;
      });
    }
    for (auto& t : threads) t.join();
  }
  for (int i = 0; i < kStreams; ++i) ASSERT_EQ(want[i].size(), static_cast<size_t>(kTokens)) << cluster.Logs();

  auto r1_before = cluster.WorkerMetrics("r1");
  ASSERT_TRUE(r1_before.ok());
  const double r1_steps_before = cluster.Metric("weft_steps_total{replica=\"r1\"}");
  std::vector<std::unique_ptr<BackgroundStream>> streams;
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(std::make_unique<BackgroundStream>(
        cluster.stub(), GreedyRequest(prompts[i % prompts.size()], kTokens)));
  }
  // r1 is stopped once it has sampled tokens for some streams: they are surely
  // unfinished (each needs kTokens steps); waiting for every stream's tokens instead
  // could let r1 finish first while r0 lagged, and an idle r1 misses no deadline.
  const absl::Status r1_ran = cluster.WaitWorkerSampledMore(
      "r1", r1_before->Get("weft_worker_sampled_tokens_total"));
  ASSERT_TRUE(r1_ran.ok()) << "replica r1 ran none of the streams: stopping it would test nothing: "
                           << r1_ran;
  const double r0_steps_at_stop = cluster.Metric("weft_steps_total{replica=\"r0\"}");

  ASSERT_TRUE(cluster.worker("r1")->Pause());
  ASSERT_LT(cluster.Metric("weft_steps_total{replica=\"r1\"}") - r1_steps_before + 1, kTokens)
      << "r1's sequences may have finished already";
  // While r1 is stopped and before it is fenced, the scheduler answers and r0 steps.
  EXPECT_EQ(cluster.Health(), "SERVING");
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    weft::v1::ListModelsResponse resp;
    EXPECT_TRUE(cluster.stub()->ListModels(&ctx, {}, &resp).ok());
  }

  // Fenced for missed deadlines (two of them; the guard is generous).
  const std::string fenced = "weft_replicas_fenced_total{reason=\"step_deadlines\"}";
  EXPECT_TRUE(WaitFor([&] { return cluster.Metric(fenced) == 1; }, absl::Seconds(60)))
      << cluster.Logs();
  // The fence is counted after the replica is dropped: the gauge has moved already.
  EXPECT_EQ(cluster.Metric("weft_replicas"), 1);
  EXPECT_GT(cluster.Metric("weft_steps_total{replica=\"r0\"}"), r0_steps_at_stop)
      << "the live replica stopped stepping while the other hung";

  int completed = 0;
  for (int i = 0; i < kStreams; ++i) {
    SCOPED_TRACE(absl::StrCat("stream ", i));
    StreamResult r = streams[i]->Join();
    if (r.status.ok()) {
      ++completed;
      EXPECT_EQ(absl::StrJoin(r.token_ids, " "), absl::StrJoin(want[i], " "));
    } else {
      EXPECT_EQ(CodeName(r.status.error_code()), "UNAVAILABLE") << r.status.error_message();
    }
  }
  EXPECT_GT(completed, 0);
  EXPECT_GT(cluster.Metric("weft_requeued_requests_total"), 0);
  EXPECT_TRUE(WaitFor([&] { return cluster.Metric("weft_kv_blocks_used") == 0; }, absl::Seconds(30)))
      << "blocks used " << cluster.Metric("weft_kv_blocks_used");
  EXPECT_EQ(cluster.Health(), "SERVING");

  // Resumed, the worker sees its stream was closed, drops its state and re-attaches.
  ASSERT_TRUE(cluster.worker("r1")->Signal(SIGCONT));
  EXPECT_TRUE(cluster.WaitReplicas(2).ok()) << cluster.Logs();
  // Attached twice in all, and attached now.
  const absl::Status reattached = cluster.WaitWorkerAttached("r1", 2);
  EXPECT_TRUE(reattached.ok()) << reattached;
  EXPECT_EQ(cluster.Metric(fenced), 1);
}

}  // namespace
}  // namespace weft::e2e

// End to end, real processes: RELIABILITY.md's kill_worker_midstream. Two replicas (one
// single-rank worker each), 16 greedy streams; SIGKILL one worker mid-generation. Every
// stream soon either receives tokens from the live replica or ends UNAVAILABLE, all of
// them end, the streams that complete have exactly the tokens an undisturbed run gives
// (re-queueing recomputes, never changes a token), no block leaks, the scheduler keeps
// serving, and it takes the replica back when a new worker for it attaches.
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

constexpr int kStreams = 16;
constexpr int kTokens = 40;


TEST(KillWorkerE2eTest, StreamsMoveToTheLiveReplicaAndTheReplicaComesBack) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  const std::vector<std::string>& prompts = TestPrompts();
  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler({"--max_retries=2"}).ok()) << cluster.Logs();
  for (const char* r : {"r0", "r1"}) {
    WorkerSpec w;
    w.replica = r;
    w.num_kv_blocks = 128;
    w.threads = 1;
    ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  }
  ASSERT_TRUE(cluster.WaitReplicas(2).ok()) << cluster.Logs();
  const double blocks_total_two = cluster.Metric("weft_kv_blocks_capacity");

  // Undisturbed outputs (the batch-invariance test ties these to weft-generate).
  const std::vector<std::vector<int32_t>> want = GreedyOutputs(cluster, prompts, kTokens);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(want[i].size(), static_cast<size_t>(kTokens)) << "prompt " << i << "\n" << cluster.Logs();
  }

  auto r1_before = cluster.WorkerMetrics("r1");
  ASSERT_TRUE(r1_before.ok()) << r1_before.status();
  const double r1_steps_before = cluster.Metric("weft_steps_total{replica=\"r1\"}");
  std::vector<std::unique_ptr<BackgroundStream>> streams;
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(std::make_unique<BackgroundStream>(
        cluster.stub(), GreedyRequest(prompts[i % prompts.size()], kTokens)));
  }
  // Mid-generation: r1 has sampled tokens for some streams and is paused there, so the
  // kill surely finds them unfinished (each needs kTokens steps); waiting for every
  // stream's tokens instead could let r1 finish first while r0 lagged.
  const absl::Status r1_ran = cluster.WaitWorkerSampledMore(
      "r1", r1_before->Get("weft_worker_sampled_tokens_total"));
  ASSERT_TRUE(r1_ran.ok()) << "replica r1 ran none of the streams: killing it would test nothing: "
                           << r1_ran;
  ScopedPause pause(cluster.worker("r1"));
  ASSERT_TRUE(pause.paused()) << cluster.Logs();
  ASSERT_LT(cluster.Metric("weft_steps_total{replica=\"r1\"}") - r1_steps_before + 1, kTokens)
      << "r1's sequences may have finished already";

  std::vector<int> at_kill;
  for (auto& s : streams) at_kill.push_back(s->num_tokens());
  ASSERT_TRUE(cluster.worker("r1")->Signal(SIGKILL));
  pause.Resume();  // before its ChildProcess is replaced below
  ASSERT_TRUE(cluster.worker("r1")->Wait(absl::Seconds(10)).has_value());

  // Within the 30 s guard, every stream has either received tokens since the kill (from
  // r0) or ended.
  EXPECT_TRUE(WaitFor(
      [&] {
        for (int i = 0; i < kStreams; ++i) {
          if (!streams[i]->done() && streams[i]->num_tokens() <= at_kill[i]) return false;
        }
        return true;
      },
      absl::Seconds(30)))
      << cluster.Logs();

  int completed = 0, unavailable = 0;
  for (int i = 0; i < kStreams; ++i) {
    SCOPED_TRACE(absl::StrCat("stream ", i));
    StreamResult r = streams[i]->Join();
    if (r.status.ok()) {
      ++completed;
      EXPECT_EQ(absl::StrJoin(r.token_ids, " "), absl::StrJoin(want[i % prompts.size()], " "));
    } else {
      ++unavailable;
      EXPECT_EQ(CodeName(r.status.error_code()), "UNAVAILABLE") << r.status.error_message();
    }
  }
  EXPECT_EQ(completed + unavailable, kStreams);
  EXPECT_GT(completed, 0);

  // The replica is gone, its blocks with it; the rest is idle with nothing referenced;
  // the scheduler still serves.
  EXPECT_TRUE(WaitFor([&] { return cluster.Metric("weft_kv_blocks_used") == 0; }, absl::Seconds(30)))
      << "blocks used " << cluster.Metric("weft_kv_blocks_used");
  EXPECT_EQ(cluster.Metric("weft_replicas"), 1);
  EXPECT_EQ(cluster.Metric("weft_kv_blocks_capacity"), blocks_total_two / 2);
  auto m = cluster.Metrics();
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->Sum("weft_replicas_fenced_total"), 1);
  EXPECT_GT(m->Get("weft_requeued_requests_total"), 0);
  EXPECT_EQ(cluster.Health(), "SERVING");
  StreamResult after = Generate(cluster.stub(), GreedyRequest(prompts[0], kTokens));
  EXPECT_TRUE(after.status.ok()) << after.status.error_message();
  EXPECT_EQ(absl::StrJoin(after.token_ids, " "), absl::StrJoin(want[0], " "));

  // A new worker for r1 attaches: the replica is taken back and runs requests again.
  WorkerSpec w;
  w.replica = "r1";
  w.num_kv_blocks = 128;
  w.threads = 1;
  ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(2).ok()) << cluster.Logs();
  EXPECT_EQ(cluster.Metric("weft_kv_blocks_capacity"), blocks_total_two);
  // Prompts no replica has cached (a cache hit would route them all to r0): the router
  // spreads them by free blocks.
  std::vector<std::string> fresh;
  for (size_t i = 0; i < prompts.size(); ++i) fresh.push_back(absl::StrCat("Question ", i, ": ", prompts[i]));
  const std::vector<std::vector<int32_t>> again = GreedyOutputs(cluster, fresh, kTokens);
  for (size_t i = 0; i < fresh.size(); ++i) {
    EXPECT_EQ(again[i].size(), static_cast<size_t>(kTokens)) << "prompt " << i << "\n" << cluster.Logs();
  }
  auto r1_new = cluster.WorkerMetrics("r1");
  ASSERT_TRUE(r1_new.ok()) << r1_new.status();
  EXPECT_GT(r1_new->Get("weft_worker_sampled_tokens_total"), 0) << "no request ran on the new r1";
  EXPECT_EQ(r1_new->Get("weft_worker_step_errors_total"), 0);
  EXPECT_TRUE(WaitFor([&] { return cluster.Metric("weft_kv_blocks_used") == 0; }, absl::Seconds(30)));
}

}  // namespace
}  // namespace weft::e2e

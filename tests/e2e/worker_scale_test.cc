// End to end, real processes: RELIABILITY.md's worker_scale_up and worker_scale_down.
//
// ScaleUpThenDrain: 32 greedy streams on 2 replicas (4 sequences per step each, so most
// wait), a third replica attaches under that load and receives sequences within a few
// steps (weft_steps_total per replica), then one of the first two gets SIGTERM: its
// /readyz turns 503 while it still runs, it finishes the sequences it runs (nothing is
// re-queued: weft_requeued_requests_total stays 0) and exits 0; every stream ends OK
// with all its tokens and KV blocks are back at baseline.
//
// DrainTimeout: a drain timeout far shorter than the generations: what the draining
// replica still runs is re-queued on the other one with the tokens generated so far,
// and every stream still ends OK with exactly the tokens an undisturbed run gives.
//
// TensorParallel: SIGTERM on one rank of a TP=2 replica drains the whole replica: both
// ranks exit 0 (rank 0 removing its shared-memory group), nothing is re-queued.
//
// WorkerBounds: a second SIGTERM, or the worker's own --drain_timeout_s, ends a drain
// the scheduler has not finished; the worker exits 0 and its requests move on.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "tests/e2e/process_harness.h"
#include "tests/e2e/test_prompts.h"

namespace weft::e2e {
namespace {

double ReplicaSteps(const Cluster& c, const std::string& replica) {
  return c.Metric(absl::StrCat("weft_steps_total{replica=\"", replica, "\"}"));
}

WorkerSpec Replica(const std::string& name) {
  WorkerSpec w;
  w.replica = name;
  w.num_kv_blocks = 256;
  w.threads = 1;
  return w;
}

TEST(WorkerScaleE2eTest, ScaleUpThenDrainOneWorkerWithoutRequeue) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  constexpr int kStreams = 32;
  constexpr int kTokens = 48;
  // r2 is planned in the loop iteration that admits it; r0 and r1 are paused meanwhile
  // and complete at most the step each had in flight.
  constexpr int kScaleUpSteps = 2;
  const std::vector<std::string>& prompts = TestPrompts();
  Cluster cluster(model);
  ASSERT_TRUE(cluster
                  .StartScheduler({"--max_num_seqs=4", "--max_num_batched_tokens=256",
                                   "--worker_drain_timeout_s=600",
                                   // r0 and r1 are paused for a while: not overdue.
                                   "--step_deadline_floor_s=600"})
                  .ok())
      << cluster.Logs();
  ASSERT_TRUE(cluster.StartReplica(Replica("r0")).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartReplica(Replica("r1")).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(2).ok()) << cluster.Logs();
  const double blocks_baseline = cluster.Metric("weft_kv_blocks_used");
  ASSERT_EQ(blocks_baseline, 0);

  // Every request starts with the same instructions (as behind a chat front end): the
  // old replicas hold them in their prefix caches, the new one does not, and it must get
  // work anyway.
  const std::string instructions =
      "You are a careful assistant. Read the text below, then continue it in the same style "
      "and register, with plain words and no lists, headings or code blocks.\n\n";
  std::vector<std::unique_ptr<BackgroundStream>> streams;
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(std::make_unique<BackgroundStream>(
        cluster.stub(), GreedyRequest(instructions + prompts[i % prompts.size()], kTokens),
        absl::Seconds(600)));
  }
  ASSERT_TRUE(WaitFor([&] { return ReplicaSteps(cluster, "r0") >= 1 && ReplicaSteps(cluster, "r1") >= 1; },
                      absl::Seconds(120)))
      << cluster.Logs();

  // Scale-up under load: r2 attaches while most streams wait. It dials the scheduler as
  // soon as it has loaded (its ports file); r0 and r1 are paused from then until r2 has
  // its first plan, so "within a few steps" is counted whatever this machine's speed
  // (each may complete the one step it had in flight, --max_steps_in_flight=1), and a
  // router that left r2 idle until r0 or r1 freed a slot would fail here.
  ASSERT_TRUE(cluster.StartReplica(Replica("r2")).ok()) << cluster.Logs();
  ScopedPause pause_r0(cluster.worker("r0"));
  ScopedPause pause_r1(cluster.worker("r1"));
  ASSERT_TRUE(pause_r0.paused() && pause_r1.paused()) << cluster.Logs();
  const double old_at_pause = ReplicaSteps(cluster, "r0") + ReplicaSteps(cluster, "r1");
  ASSERT_TRUE(WaitFor([&] { return cluster.Metric("weft_replicas") == 3; }, absl::Seconds(120),
                      absl::Milliseconds(10)))
      << cluster.Logs();
  const double waiting_at_attach = cluster.Metric("weft_requests_waiting");
  ASSERT_GT(waiting_at_attach, 0) << "the load ended before r2 attached: nothing to test";
  auto r2_plans = [&] {
    auto m = cluster.WorkerMetrics("r2");
    return m.ok() ? m->Get("weft_worker_plans_received_total") : 0;
  };
  ASSERT_TRUE(WaitFor([&] { return r2_plans() >= 1; }, absl::Seconds(120), absl::Milliseconds(10)))
      << "the new replica never received a sequence\n" << cluster.Logs();
  const double old_at_first = ReplicaSteps(cluster, "r0") + ReplicaSteps(cluster, "r1");
  pause_r0.Resume();
  pause_r1.Resume();
  std::printf("scale-up: %.0f requests waiting when r2 attached; it received its first plan "
              "within %.0f steps of r0+r1\n", waiting_at_attach, old_at_first - old_at_pause);
  EXPECT_LE(old_at_first - old_at_pause, kScaleUpSteps)
      << "r2 received its first plan " << old_at_first - old_at_pause << " steps of r0+r1 after "
      << "it attached with " << waiting_at_attach << " requests waiting";
  ASSERT_TRUE(WaitFor([&] { return ReplicaSteps(cluster, "r2") >= 4; }, absl::Seconds(120)));

  // Scale-down: SIGTERM r1 while it runs sequences.
  ChildProcess* r1 = cluster.worker("r1");
  const int r1_http = cluster.worker_metrics_port("r1");
  ASSERT_EQ(HttpStatus(r1_http, "/readyz"), 200);
  const double r1_steps_at_term = ReplicaSteps(cluster, "r1");
  ASSERT_TRUE(r1->Signal(SIGTERM));
  // Not ready at once, while the process still finishes its sequences.
  int readyz = 0;
  ASSERT_TRUE(WaitFor([&] { return (readyz = HttpStatus(r1_http, "/readyz")) != 200; },
                      absl::Seconds(30), absl::Milliseconds(5)));
  EXPECT_EQ(readyz, 503) << "the draining worker should still answer its probes";
  EXPECT_EQ(HttpStatus(r1_http, "/livez"), 200);
  ASSERT_TRUE(r1->Wait(absl::Seconds(300)).has_value()) << "r1 never finished draining\n"
                                                       << cluster.Logs();
  EXPECT_EQ(r1->exit_code(), 0) << r1->LogTail();
  EXPECT_NE(r1->LogTail(20000).find("replica drained"), std::string::npos) << r1->LogTail();
  EXPECT_GT(ReplicaSteps(cluster, "r1"), r1_steps_at_term)
      << "r1 ran no step after SIGTERM: the drain had nothing to finish";

  for (int i = 0; i < kStreams; ++i) {
    StreamResult r = streams[i]->Join(absl::Seconds(600));
    EXPECT_TRUE(r.status.ok()) << "stream " << i << ": " << CodeName(r.status.error_code()) << " "
                               << r.status.error_message();
    EXPECT_EQ(r.token_ids.size(), static_cast<size_t>(kTokens)) << "stream " << i;
  }
  auto m = cluster.Metrics();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->Get("weft_requeued_requests_total"), 0);
  EXPECT_EQ(m->Sum("weft_replicas_fenced_total"), 0);
  EXPECT_EQ(m->Get("weft_replicas"), 2);
  EXPECT_TRUE(WaitFor([&] { return cluster.Metric("weft_replicas_draining") == 0; }, absl::Seconds(10)));
  EXPECT_TRUE(WaitFor([&] { return cluster.Metric("weft_kv_blocks_used") == blocks_baseline; },
                      absl::Seconds(30)))
      << "blocks used " << cluster.Metric("weft_kv_blocks_used");
  EXPECT_EQ(HttpStatus(cluster.metrics_port(), "/readyz"), 200) << "r0 and r2 still serve";
  EXPECT_EQ(cluster.Health(), "SERVING");
}

TEST(WorkerScaleE2eTest, DrainTimeoutRequeuesTheRestWithTokensKept) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  // r1 is signalled after its first step: dozens of steps are still to run when its
  // 50 ms drain timeout fires.
  constexpr int kTokens = 48;
  const std::vector<std::string>& prompts = TestPrompts();
  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler({"--worker_drain_timeout_s=0.05"}).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartReplica(Replica("r0")).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartReplica(Replica("r1")).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(2).ok()) << cluster.Logs();

  // Undisturbed outputs first (greedy outputs are batch-invariant and re-queueing
  // recomputes, so a disturbed run must give exactly these).
  const std::vector<std::vector<int32_t>> want = GreedyOutputs(cluster, prompts, kTokens);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(want[i].size(), static_cast<size_t>(kTokens)) << "prompt " << i << "\n" << cluster.Logs();
  }

  const double r1_steps_before = ReplicaSteps(cluster, "r1");  // the undisturbed run's
  std::vector<std::unique_ptr<BackgroundStream>> streams;
  for (size_t i = 0; i < prompts.size(); ++i) {
    streams.push_back(std::make_unique<BackgroundStream>(
        cluster.stub(), GreedyRequest(prompts[i], kTokens), absl::Seconds(600)));
  }
  // Mid-generation: r1 has run a step (its sequences have a token), and is paused there
  // while it is signalled, so its drain surely finds them unfinished (each needs kTokens
  // steps; waiting for every stream's tokens could let r1 finish first while r0 lagged).
  ASSERT_TRUE(WaitFor([&] { return ReplicaSteps(cluster, "r1") > r1_steps_before; },
                      absl::Seconds(120), absl::Milliseconds(5)))
      << cluster.Logs();
  ChildProcess* r1 = cluster.worker("r1");
  {
    ScopedPause pause(r1);
    ASSERT_TRUE(pause.paused()) << cluster.Logs();
    // Its steps for these streams, and the one in flight, are fewer than a stream needs.
    ASSERT_LT(ReplicaSteps(cluster, "r1") - r1_steps_before + 1, kTokens)
        << "r1's sequences may have finished";
    ASSERT_TRUE(r1->Signal(SIGTERM));  // taken when it resumes
  }
  ASSERT_TRUE(r1->Wait(absl::Seconds(120)).has_value()) << cluster.Logs();
  EXPECT_EQ(r1->exit_code(), 0) << r1->LogTail();

  for (size_t i = 0; i < streams.size(); ++i) {
    StreamResult r = streams[i]->Join(absl::Seconds(600));
    ASSERT_TRUE(r.status.ok()) << "stream " << i << ": " << r.status.error_message();
    EXPECT_EQ(absl::StrJoin(r.token_ids, " "), absl::StrJoin(want[i], " ")) << "stream " << i;
  }
  auto m = cluster.Metrics();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_GT(m->Get("weft_requeued_requests_total"), 0) << "the drain timeout re-queued nothing";
  EXPECT_EQ(m->Sum("weft_replicas_fenced_total"), 0);
  EXPECT_EQ(m->Get("weft_replicas"), 1);
  EXPECT_NE(cluster.scheduler()->LogTail(50000).find("drain timed out"), std::string::npos);
  EXPECT_TRUE(WaitFor([&] { return cluster.Metric("weft_kv_blocks_used") == 0; }, absl::Seconds(30)))
      << "blocks used " << cluster.Metric("weft_kv_blocks_used");
}

TEST(WorkerScaleE2eTest, SigtermOnEitherRankDrainsTheWholeTensorParallelReplica) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  constexpr int kStreams = 8;
  constexpr int kTokens = 32;
  const std::vector<std::string>& prompts = TestPrompts();
  // A name no other run uses: its segments in /dev/shm are this test's alone.
  const std::string tp =
      absl::StrCat("tpdrain", ::getpid(), "-", absl::ToUnixMicros(absl::Now()) % 1000000);
  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler({"--worker_drain_timeout_s=600"}).ok()) << cluster.Logs();
  WorkerSpec tp_spec = Replica(tp);
  tp_spec.world_size = 2;
  ASSERT_TRUE(cluster.StartReplica(tp_spec).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartReplica(Replica("solo")).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(2).ok()) << cluster.Logs();
  ASSERT_EQ(GroupSegments(tp).size(), 1u);

  std::vector<std::unique_ptr<BackgroundStream>> streams;
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(std::make_unique<BackgroundStream>(
        cluster.stub(), GreedyRequest(prompts[i % prompts.size()], kTokens), absl::Seconds(600)));
  }
  // The TP replica is paused after its first step, so the drain surely finds its
  // sequences unfinished (each needs kTokens steps). Waiting for every stream's tokens
  // instead let it finish first on a loaded machine: the streams on "solo" were the slow
  // ones ("the TP replica ran nothing while draining", 1 run in 3 under CPU load).
  ASSERT_TRUE(WaitFor([&] { return ReplicaSteps(cluster, tp) >= 1; }, absl::Seconds(120),
                      absl::Milliseconds(5)))
      << "the TP replica runs none of the streams\n" << cluster.Logs();
  double tp_steps = 0;
  {
    ScopedPause pause0(cluster.worker(tp, 0));
    ScopedPause pause1(cluster.worker(tp, 1));
    ASSERT_TRUE(pause0.paused() && pause1.paused()) << cluster.Logs();
    // Completed so far, and at most one more (the step in flight when they stopped).
    tp_steps = ReplicaSteps(cluster, tp) + 1;
    ASSERT_LT(tp_steps, kTokens) << "the TP replica's sequences may have finished already";
    // SIGTERM on rank 1 only (taken when it resumes): rank 0 is told by the scheduler and
    // stops being ready too.
    ASSERT_TRUE(cluster.worker(tp, 1)->Signal(SIGTERM));
  }  // both resumed
  const int rank0_http = cluster.worker_metrics_port(tp, 0);
  int readyz = 0;
  EXPECT_TRUE(WaitFor([&] { return (readyz = HttpStatus(rank0_http, "/readyz")) != 200; },
                      absl::Seconds(30), absl::Milliseconds(5)));
  EXPECT_TRUE(readyz == 503 || readyz == -1) << readyz;  // -1: rank 0 already exited
  for (int rank : {0, 1}) {
    ChildProcess* p = cluster.worker(tp, rank);
    ASSERT_TRUE(p->Wait(absl::Seconds(300)).has_value()) << "rank " << rank << "\n" << cluster.Logs();
    EXPECT_EQ(p->exit_code(), 0) << "rank " << rank << "\n" << p->LogTail();
    EXPECT_NE(p->LogTail(20000).find("replica drained"), std::string::npos) << p->LogTail();
  }
  EXPECT_TRUE(GroupSegments(tp).empty()) << "rank 0 leaves its group segment behind";
  EXPECT_GT(ReplicaSteps(cluster, tp), tp_steps) << "the TP replica ran nothing while draining";
  for (int i = 0; i < kStreams; ++i) {
    StreamResult r = streams[i]->Join(absl::Seconds(600));
    EXPECT_TRUE(r.status.ok()) << "stream " << i << ": " << r.status.error_message();
    EXPECT_EQ(r.token_ids.size(), static_cast<size_t>(kTokens)) << "stream " << i;
  }
  EXPECT_EQ(cluster.Metric("weft_requeued_requests_total"), 0);
  EXPECT_EQ(cluster.Metric("weft_replicas"), 1);
  EXPECT_TRUE(WaitFor([&] { return cluster.Metric("weft_kv_blocks_used") == 0; }, absl::Seconds(30)));
}

// The worker's own ways out of a drain the scheduler has not finished (it would wait for
// --worker_drain_timeout_s=600): a second SIGTERM, or its --drain_timeout_s. Either way it
// exits 0 and its requests are re-queued elsewhere, tokens kept.
TEST(WorkerScaleE2eTest, ASecondSignalOrTheWorkersOwnBoundEndsADrain) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  constexpr int kTokens = 96;
  const std::vector<std::string>& prompts = TestPrompts();
  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler({"--worker_drain_timeout_s=600"}).ok()) << cluster.Logs();
  WorkerSpec bounded = Replica("bounded");
  bounded.extra_flags = {"--drain_timeout_s=0.2"};
  for (const WorkerSpec& w : {Replica("r0"), bounded, Replica("twice")}) {
    ASSERT_TRUE(cluster.StartReplica(w).ok()) << cluster.Logs();
  }
  ASSERT_TRUE(cluster.WaitReplicas(3).ok()) << cluster.Logs();
  std::vector<std::unique_ptr<BackgroundStream>> streams;
  for (size_t i = 0; i < prompts.size(); ++i) {
    streams.push_back(std::make_unique<BackgroundStream>(
        cluster.stub(), GreedyRequest(prompts[i], kTokens), absl::Seconds(600)));
  }
  // Both run sequences and are paused as they are signalled (the signals are taken when
  // they resume), so their drains surely find them unfinished (each needs kTokens steps).
  ASSERT_TRUE(WaitFor(
      [&] { return ReplicaSteps(cluster, "bounded") > 0 && ReplicaSteps(cluster, "twice") > 0; },
      absl::Seconds(120), absl::Milliseconds(5)))
      << cluster.Logs();
  ChildProcess* b = cluster.worker("bounded");
  ChildProcess* t = cluster.worker("twice");
  {
    ScopedPause pause_b(b);
    ScopedPause pause_t(t);
    ASSERT_TRUE(pause_b.paused() && pause_t.paused()) << cluster.Logs();
    for (const char* r : {"bounded", "twice"}) {
      ASSERT_LT(ReplicaSteps(cluster, r) + 1, kTokens) << r << "'s sequences may have finished";
    }
    ASSERT_TRUE(b->Signal(SIGTERM));
    ASSERT_TRUE(t->Signal(SIGTERM));
  }
  // The second signal once the first was taken (two pending SIGTERMs would merge).
  ASSERT_TRUE(WaitFor([&] { return t->LogTail(20000).find("draining the replica") != std::string::npos; },
                      absl::Seconds(30)))
      << t->LogTail();
  ASSERT_TRUE(t->Signal(SIGTERM));
  for (ChildProcess* p : {b, t}) {
    ASSERT_TRUE(p->Wait(absl::Seconds(60)).has_value()) << p->LogTail();
    EXPECT_EQ(p->exit_code(), 0) << p->LogTail();
  }
  EXPECT_NE(b->LogTail(20000).find("--drain_timeout_s: stopping"), std::string::npos) << b->LogTail();
  EXPECT_NE(t->LogTail(20000).find("signal 15: stopping"), std::string::npos) << t->LogTail();

  for (size_t i = 0; i < streams.size(); ++i) {
    StreamResult r = streams[i]->Join(absl::Seconds(600));
    EXPECT_TRUE(r.status.ok()) << "stream " << i << ": " << r.status.error_message();
    EXPECT_EQ(r.token_ids.size(), static_cast<size_t>(kTokens)) << "stream " << i;
  }
  EXPECT_EQ(cluster.Metric("weft_replicas"), 1);
  EXPECT_GT(cluster.Metric("weft_requeued_requests_total"), 0);
  EXPECT_TRUE(WaitFor([&] { return cluster.Metric("weft_kv_blocks_used") == 0; }, absl::Seconds(30)));
}

}  // namespace
}  // namespace weft::e2e

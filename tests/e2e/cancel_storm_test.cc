// End to end, real processes: RELIABILITY.md's cancel_storm. 64 streams; half of them
// are cancelled by their clients at random points (before any token, or after a random
// number of tokens). A sentinel stream keeps the scheduler stepping after the last
// cancel, so "blocks freed by the second step after the last cancel" is checked against
// weft_steps_total, counted from when the scheduler has ended every cancelled call (the
// event /metrics shows): by then the only referenced blocks are the sentinel's own. No plan
// may reference a freed block: the worker reports no step error, no replica is fenced,
// and every surviving stream's greedy tokens equal weft-generate's (KV written into a
// block that another sequence still uses would change them).
#include <random>
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

constexpr int kStreams = 64;
constexpr int kKeeperTokens[] = {6, 14, 23, 32};  // prefixes of the 32-token reference
constexpr int kBlockSize = 16;
// Hang guard of every call: 64 streams on a loaded 2-core machine took over 120 s once
// (a keeper ended DEADLINE_EXCEEDED); the test's own Bazel timeout (large) is 900 s.
constexpr absl::Duration kHangGuard = absl::Seconds(600);

TEST(CancelStormE2eTest, HalfOfSixtyFourStreamsCancelledAtRandomPointsLeakNothing) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  const std::vector<std::string>& prompts = TestPrompts();
  std::vector<std::vector<int32_t>> reference;
  for (const std::string& p : prompts) {
    auto ids = ReferenceTokens(model, p, 32);
    ASSERT_TRUE(ids.ok()) << ids.status();
    reference.push_back(*ids);
  }

  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler({"--max_num_batched_tokens=512"}).ok()) << cluster.Logs();
  WorkerSpec w;
  w.num_kv_blocks = 320;
  w.threads = 2;
  ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();

  // The sentinel: a prompt of its own (no shared prefix blocks) and a long generation.
  const std::string sentinel_prompt = "Write a long poem about the mountains and the sky.";
  BackgroundStream sentinel(cluster.stub(), GreedyRequest(sentinel_prompt, 1500), kHangGuard);
  ASSERT_TRUE(sentinel.WaitTokens(1)) << cluster.Logs();
  const double sentinel_prompt_tokens = cluster.Metric("weft_prompt_tokens_total");  // the only one
  ASSERT_GT(sentinel_prompt_tokens, 0);

  std::mt19937 rng(20240611);
  struct Plan {
    bool victim = false;
    int prompt = 0;
    int max_tokens = 0;
    int cancel_after = 0;  // victims: tokens received before cancelling (0: at once)
    int cancel_delay_ms = 0;  // cancel_after 0: delay after the call starts
  };
  std::vector<Plan> plans(kStreams);
  std::vector<int> order(kStreams);
  for (int i = 0; i < kStreams; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  for (int k = 0; k < kStreams; ++k) {
    Plan& p = plans[order[k]];
    p.victim = k < kStreams / 2;
    p.prompt = static_cast<int>(rng() % prompts.size());
    p.max_tokens = p.victim ? 1000 : kKeeperTokens[rng() % 4];
    p.cancel_after = p.victim ? static_cast<int>(rng() % 41) : 0;  // 0..40 tokens
    p.cancel_delay_ms = static_cast<int>(rng() % 30);
  }

  std::vector<StreamResult> results(kStreams);
  std::atomic<int> victims_left{kStreams / 2};
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      const Plan& p = plans[i];
      auto req = GreedyRequest(prompts[p.prompt], p.max_tokens);
      if (!p.victim) {
        results[i] = Generate(cluster.stub(), req, kHangGuard);
        return;
      }
      grpc::ClientContext ctx;
      std::thread canceller;
      if (p.cancel_after == 0) {
        // Cancelled before any token: possibly while still queued.
        canceller = std::thread([&ctx, &p] {
          absl::SleepFor(absl::Milliseconds(p.cancel_delay_ms));
          ctx.TryCancel();
        });
      }
      int got = 0;
      results[i] = Generate(
          cluster.stub(), req, kHangGuard,
          [&](const weft::v1::GenerateResponse& r) {
            got += r.token_ids_size();
            return p.cancel_after == 0 || got < p.cancel_after;
          },
          &ctx);
      if (canceller.joinable()) canceller.join();
      victims_left.fetch_sub(1);
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(victims_left.load(), 0);
  // A client's call ends (CANCELLED) as it cancels; the scheduler learns of it when the
  // transport delivers the reset. Count the steps from when it has ended every victim
  // (only the sentinel runs, nothing waits), not from the client's side: under CPU steal
  // the sentinel's quick steps could otherwise run ahead of the last reset.
  double running = -1, waiting = -1;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto m = cluster.Metrics();
        running = m.ok() ? m->Get("weft_requests_running", -1) : -1;
        waiting = m.ok() ? m->Get("weft_requests_waiting", -1) : -1;
        return (running == 1 && waiting == 0) || sentinel.done();
      },
      absl::Seconds(60)))
      << "running " << running << ", waiting " << waiting << "\n" << cluster.Logs();
  const double steps_at_last_cancel = cluster.Steps();
  const int sentinel_before = sentinel.num_tokens();
  ASSERT_FALSE(sentinel.done()) << "the sentinel must outlive the storm\n" << cluster.Logs();

  for (int i = 0; i < kStreams; ++i) {
    const Plan& p = plans[i];
    const StreamResult& r = results[i];
    SCOPED_TRACE(absl::StrCat("stream ", i, p.victim ? " (victim, cancel after " : " (keeper, ",
                              p.victim ? p.cancel_after : p.max_tokens, ")"));
    if (p.victim) {
      EXPECT_EQ(CodeName(r.status.error_code()), "CANCELLED") << r.status.error_message();
      // Whatever it received before the cancel is a prefix of its greedy output.
      const size_t n = std::min(r.token_ids.size(), reference[p.prompt].size());
      EXPECT_EQ(absl::StrJoin(r.token_ids.begin(), r.token_ids.begin() + n, " "),
                absl::StrJoin(reference[p.prompt].begin(), reference[p.prompt].begin() + n, " "));
    } else {
      ASSERT_TRUE(r.status.ok()) << CodeName(r.status.error_code()) << " " << r.status.error_message();
      EXPECT_EQ(absl::StrJoin(r.token_ids, " "),
                absl::StrJoin(reference[p.prompt].begin(), reference[p.prompt].begin() + p.max_tokens, " "));
    }
  }

  // Two steps after the last cancel (the sentinel keeps the scheduler stepping), the only
  // referenced blocks are the sentinel's: ceil((prompt + tokens so far + 1) / 16).
  ASSERT_TRUE(WaitFor([&] { return cluster.Steps() >= steps_at_last_cancel + 2 || sentinel.done(); },
                      absl::Seconds(60)))
      << cluster.Logs();
  const double used = cluster.Metric("weft_kv_blocks_used");
  const int sentinel_after = sentinel.num_tokens();
  ASSERT_FALSE(sentinel.done()) << cluster.Logs();
  auto m = cluster.Metrics();
  ASSERT_TRUE(m.ok());
  const int prompt = static_cast<int>(sentinel_prompt_tokens);
  const double min_blocks = (prompt + sentinel_before + kBlockSize - 1) / kBlockSize;
  const double max_blocks = (prompt + sentinel_after + 2 + kBlockSize - 1) / kBlockSize;
  EXPECT_GE(used, min_blocks);
  EXPECT_LE(used, max_blocks) << "blocks of cancelled streams still referenced two steps after the "
                                 "last cancel (sentinel has "
                              << sentinel_before << ".." << sentinel_after << " tokens)";
  EXPECT_EQ(m->Get("weft_requests_running"), 1);
  EXPECT_EQ(m->Get("weft_requests_waiting"), 0);

  // Idle: zero referenced blocks; nothing failed on the worker; no replica fenced.
  sentinel.Cancel();
  EXPECT_EQ(sentinel.Join().status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitFor([&] { return cluster.Metric("weft_kv_blocks_used") == 0; }, absl::Seconds(30)))
      << "blocks used " << cluster.Metric("weft_kv_blocks_used");
  auto end = cluster.Metrics();
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->Sum("weft_replicas_fenced_total"), 0);
  EXPECT_EQ(end->Get("weft_requests_status_total{code=\"INTERNAL\"}"), 0);
  EXPECT_EQ(end->Get("weft_requests_status_total{code=\"OK\"}"), kStreams / 2);
  EXPECT_EQ(end->Get("weft_replicas"), 1);
  auto wm = cluster.WorkerMetrics("r0");
  ASSERT_TRUE(wm.ok()) << wm.status();
  EXPECT_EQ(wm->Get("weft_worker_step_errors_total"), 0);
  EXPECT_GT(wm->Get("weft_worker_steps_total"), 0);
}

}  // namespace
}  // namespace weft::e2e

// End to end, real processes: RELIABILITY.md's sigterm_drain (and the "draining" row of
// the bad-input matrix). SIGTERM the scheduler with 16 streams in flight: health turns
// NOT_SERVING before the next step (counted with weft_steps_total), new calls get
// UNAVAILABLE, the 16 streams finish whole, and the process exits 0. With a drain
// timeout too short for the streams, the rest end UNAVAILABLE and it still exits 0.
#include <signal.h>

#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "tests/e2e/process_harness.h"
#include "tests/e2e/test_prompts.h"

namespace weft::e2e {
namespace {

constexpr int kStreams = 16;

std::unique_ptr<Cluster> StartCluster(const std::string& model, std::vector<std::string> flags) {
  auto cluster = std::make_unique<Cluster>(model);
  EXPECT_TRUE(cluster->StartScheduler(std::move(flags)).ok()) << cluster->Logs();
  WorkerSpec w;
  w.num_kv_blocks = 192;
  w.threads = 2;
  EXPECT_TRUE(cluster->StartWorker(w).ok()) << cluster->Logs();
  EXPECT_TRUE(cluster->WaitReplicas(1).ok()) << cluster->Logs();
  return cluster;
}

TEST(DrainE2eTest, SigtermStopsAdmittingAndFinishesInFlightStreams) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  const std::vector<std::string>& prompts = TestPrompts();
  // The worker is paused below while the test reads the step counter: no step deadline.
  auto cluster = StartCluster(model, {"--drain_timeout_s=120", "--step_deadline_floor_s=600"});
  ASSERT_EQ(cluster->Health(), "SERVING");

  const int tokens = 40;
  std::vector<std::unique_ptr<BackgroundStream>> streams;
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(std::make_unique<BackgroundStream>(
        cluster->stub(), GreedyRequest(prompts[i % prompts.size()], tokens)));
  }
  for (auto& s : streams) ASSERT_TRUE(s->WaitTokens(1)) << cluster->Logs();

  // "Before the next step" counted whatever this machine's speed: the worker is paused,
  // so at most the one step in flight (--max_steps_in_flight=1; its result may already
  // be on its way) completes until the worker resumes. A health flip that waited for a
  // step would not come.
  ScopedPause pause(cluster->worker("r0"));
  ASSERT_TRUE(pause.paused()) << cluster->Logs();
  ASSERT_EQ(cluster->Health(), "SERVING");
  const double steps_before = cluster->Steps();
  ASSERT_TRUE(cluster->scheduler()->Signal(SIGTERM));
  std::string health;
  ASSERT_TRUE(WaitFor(
      [&] {
        health = cluster->Health();
        return health != "SERVING";
      },
      absl::Seconds(30), absl::Milliseconds(1)));
  const double steps_at_not_serving = cluster->Steps();
  // NOT_SERVING, or (the drain sends GOAWAY and closes the listener) no connection; a
  // check that races the GOAWAY on its connection is cancelled by gRPC 1.51's server.
  EXPECT_TRUE(health == "NOT_SERVING" || absl::StartsWith(health, "error UNAVAILABLE") ||
              absl::StartsWith(health, "error CANCELLED"))
      << health;
  // At most the step that was in flight when the worker stopped completed before health
  // flipped.
  EXPECT_LE(steps_at_not_serving - steps_before, 1);
  EXPECT_EQ(cluster->Metric("weft_draining"), 1);
  pause.Resume();

  // New calls are refused while the old ones go on. A call that races the GOAWAY on its
  // connection (sent before the client read it) is cancelled by gRPC 1.51's server
  // (CANCELLED, nothing generated; CI saw it); once the client has the GOAWAY, every new
  // call is UNAVAILABLE (the listener is closed), which retry policies retry elsewhere.
  StreamResult raced = Generate(cluster->stub(), GreedyRequest(prompts[0], 4), absl::Seconds(30));
  EXPECT_TRUE(raced.status.error_code() == grpc::StatusCode::UNAVAILABLE ||
              raced.status.error_code() == grpc::StatusCode::CANCELLED)
      << CodeName(raced.status.error_code()) << " " << raced.status.error_message();
  EXPECT_EQ(raced.num_messages, 0);
  StreamResult refused = Generate(cluster->stub(), GreedyRequest(prompts[0], 4), absl::Seconds(30));
  EXPECT_EQ(CodeName(refused.status.error_code()), "UNAVAILABLE") << refused.status.error_message();
  EXPECT_EQ(refused.num_messages, 0);

  for (int i = 0; i < kStreams; ++i) {
    SCOPED_TRACE(absl::StrCat("stream ", i));
    StreamResult r = streams[i]->Join();
    ASSERT_TRUE(r.status.ok()) << CodeName(r.status.error_code()) << " " << r.status.error_message();
    EXPECT_EQ(r.token_ids.size(), static_cast<size_t>(tokens));
    EXPECT_EQ(r.finish_reason, weft::v1::FINISH_REASON_LENGTH);
  }
  ASSERT_TRUE(cluster->scheduler()->Wait(absl::Seconds(60)).has_value()) << cluster->Logs();
  EXPECT_EQ(cluster->scheduler()->exit_code(), 0) << cluster->Logs();
}

TEST(DrainE2eTest, DrainTimeoutEndsTheRestUnavailableAndExitsZero) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  const std::vector<std::string>& prompts = TestPrompts();
  auto cluster = StartCluster(model, {"--drain_timeout_s=1"});
  std::vector<std::unique_ptr<BackgroundStream>> streams;
  for (int i = 0; i < 4; ++i) {
    streams.push_back(std::make_unique<BackgroundStream>(
        cluster->stub(), GreedyRequest(prompts[i], 3000), absl::Seconds(300)));
  }
  for (auto& s : streams) ASSERT_TRUE(s->WaitTokens(1)) << cluster->Logs();
  ASSERT_TRUE(cluster->scheduler()->Signal(SIGTERM));
  for (int i = 0; i < 4; ++i) {
    StreamResult r = streams[i]->Join();
    EXPECT_EQ(CodeName(r.status.error_code()), "UNAVAILABLE") << r.status.error_message();
    EXPECT_GT(r.token_ids.size(), 0u);
    EXPECT_LT(r.token_ids.size(), 3000u);
  }
  ASSERT_TRUE(cluster->scheduler()->Wait(absl::Seconds(60)).has_value()) << cluster->Logs();
  EXPECT_EQ(cluster->scheduler()->exit_code(), 0) << cluster->Logs();
  // Each call ended by the drain has its access line.
  const std::string log = ReadFile(cluster->scheduler()->log_path());
  int lines = 0;
  for (size_t p = log.find("status=UNAVAILABLE prompt_tokens="); p != std::string::npos;
       p = log.find("status=UNAVAILABLE prompt_tokens=", p + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 4) << log;
}

}  // namespace
}  // namespace weft::e2e

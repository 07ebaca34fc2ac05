// End to end, real processes: a scheduler restart loses nothing a retrying client can
// see (issue 32). Clients are `weft generate` processes with retries on (README.md,
// "Clients retry"): a call that ends UNAVAILABLE before any token is made again. Under
// load — some calls streaming, some not yet answered — the scheduler is SIGKILLed; the
// test plays the supervisor (a kubelet restarting the pod): it starts a new scheduler on
// the same ports as soon as the old one is gone, and more clients call while it is down.
// Then:
//  * every call that had not streamed a token when the scheduler died ends OK (retried),
//    and only calls that had streamed may fail (UNAVAILABLE, reported, not repeated);
//  * the worker re-attaches by itself and the restarted scheduler serves (an event with a
//    hang guard); the times from the kill to the worker's re-admission, the first token
//    streamed and the first call completed are printed for the notes (not asserted).
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "tests/e2e/process_harness.h"

namespace weft::e2e {
namespace {

struct Client {
  std::unique_ptr<ChildProcess> process;
  std::string out;        // its stdout file: the generated text
  bool streamed_before_kill = false;
};

TEST(SchedulerRestartE2eTest, RetryingClientsLoseNothingThatHadNotStreamed) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  Cluster cluster(model);
  // A fixed public port (the restart must take the same one): picked free, it can be
  // taken by another process before the scheduler binds it; then the scheduler exits
  // and is started on another.
  int port = -1;
  std::vector<std::string> flags;
  absl::Status started_on_port = absl::UnknownError("no attempt");
  for (int attempt = 0; attempt < 5 && !started_on_port.ok(); ++attempt) {
    port = FreeLoopbackPort();
    ASSERT_GT(port, 0);
    // Two sequences at a time: of six long calls, two stream and four wait.
    flags = {absl::StrCat("--port=", port), "--max_num_seqs=2"};
    started_on_port = cluster.StartScheduler(flags);
  }
  ASSERT_TRUE(started_on_port.ok()) << started_on_port << "\n" << cluster.Logs();
  WorkerSpec w;
  w.num_kv_blocks = 256;
  ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();

  int started = 0;
  auto start_client = [&](int max_tokens) {
    Client c;
    const std::string name = absl::StrCat("client-", started++);
    c.out = absl::StrCat(cluster.dir(), "/", name, ".out");
    auto p = ChildProcess::Start(
        {Runfile("tools/cli/weft"), "generate", absl::StrCat("--server=127.0.0.1:", port),
         "--prompt=Once upon a time", absl::StrCat("--max_tokens=", max_tokens),
         "--temperature=0", "--ignore_eos", "--max_attempts=100000",
         "--retry_initial_backoff_s=0.05", "--retry_max_backoff_s=0.5", "--timeout_s=600"},
        absl::StrCat(cluster.dir(), "/", name, ".log"), c.out);
    EXPECT_TRUE(p.ok()) << p.status();
    if (p.ok()) c.process = std::move(*p);
    return c;
  };
  // Load: more long calls than the replica runs at once, so that some stream and some
  // wait when the scheduler dies.
  std::vector<Client> clients;
  // 100 tokens: seconds of streaming on a loaded 2-core machine, while the kill follows
  // the first tokens by one poll; the four waiting calls run again after the restart.
  for (int i = 0; i < 6; ++i) clients.push_back(start_client(100));
  for (const Client& c : clients) ASSERT_NE(c.process, nullptr);
  ASSERT_TRUE(WaitFor(
      [&] {
        int streaming = 0;
        for (const Client& c : clients) streaming += !ReadFile(c.out).empty();
        return streaming >= 2 && cluster.Metric("weft_requests_waiting") >= 1;
      },
      absl::Seconds(180)))
      << cluster.Logs();

  // The kill. What each client had received from the dead scheduler decides what may
  // fail; tokens sent just before the kill may still be on their way to a client, so
  // its output is read once it has reacted to the lost connection: it failed (it had
  // received something) or it said it retries (it had not). Only a scheduler on the
  // port could change its output after that, and none listens until the restart below.
  auto retries = [](const Client& c) {
    const std::string log = ReadFile(c.process->log_path());
    int n = 0;
    for (size_t at = log.find("retrying in"); at != std::string::npos;
         at = log.find("retrying in", at + 1)) {
      ++n;
    }
    return n;
  };
  std::vector<int> retries_at_kill;
  for (const Client& c : clients) retries_at_kill.push_back(retries(c));
  ASSERT_TRUE(cluster.scheduler()->Signal(SIGKILL));
  const absl::Time killed = absl::Now();
  ASSERT_TRUE(cluster.scheduler()->Wait(absl::Seconds(30)).has_value());
  for (size_t i = 0; i < clients.size(); ++i) {
    Client& c = clients[i];
    EXPECT_TRUE(WaitFor([&] { return !c.process->Running() || retries(c) > retries_at_kill[i]; },
                        absl::Seconds(60)))
        << "a client did not notice the kill:\n" << c.process->LogTail();
    c.streamed_before_kill = !ReadFile(c.out).empty();
  }
  // Calls made while no scheduler listens.
  for (int i = 0; i < 2; ++i) clients.push_back(start_client(8));
  // The supervisor restarts it on the same ports.
  ASSERT_TRUE(cluster.StartScheduler(flags, cluster.worker_port()).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1, absl::Seconds(180)).ok()) << cluster.Logs();
  const absl::Duration to_admit = absl::Now() - killed;
  // The restarted scheduler streams again: a call that had nothing before the kill has
  // its first token (from its retry).
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const Client& c : clients) {
          if (!c.streamed_before_kill && !ReadFile(c.out).empty()) return true;
        }
        return false;
      },
      absl::Seconds(300)))
      << cluster.Logs();
  const absl::Duration to_first_token = absl::Now() - killed;
  ASSERT_TRUE(WaitFor([&] { return cluster.Metric("weft_requests_status_total{code=\"OK\"}") >= 1; },
                      absl::Seconds(300)))
      << cluster.Logs();
  const absl::Duration to_serve = absl::Now() - killed;

  int retried = 0, failed_after_streaming = 0, not_streamed = 0;
  for (Client& c : clients) {
    ASSERT_TRUE(c.process->Wait(absl::Seconds(600)).has_value()) << "a client never finished";
    const std::string log = c.process->LogTail(6000);
    retried += absl::StrContains(log, "retrying in");
    if (!c.streamed_before_kill) {
      ++not_streamed;
      EXPECT_EQ(c.process->exit_code(), 0) << "a call that had not streamed failed:\n" << log;
      EXPECT_TRUE(absl::StrContains(log, "finished: FINISH_REASON_LENGTH")) << log;
    } else if (c.process->exit_code() != 0) {
      ++failed_after_streaming;
      EXPECT_TRUE(absl::StrContains(log, "weft: UNAVAILABLE")) << log;
      EXPECT_FALSE(absl::StrContains(log, "retrying in")) << "repeated after a token:\n" << log;
    }
  }
  EXPECT_GE(not_streamed, 3) << "the kill found no call waiting";
  EXPECT_GE(retried, 3) << "no call was retried";
  EXPECT_TRUE(WaitFor([&] { return cluster.Metric("weft_kv_blocks_used") == 0; }, absl::Seconds(60)));
  std::printf(
      "scheduler_restart: %d calls, %d had not streamed (all ended OK), %d had streamed and "
      "ended UNAVAILABLE, %d retried; from the kill: worker re-admitted by the restarted "
      "scheduler %.1f s, first token streamed %.1f s, first call completed (OK) %.1f s\n",
      static_cast<int>(clients.size()), not_streamed, failed_after_streaming, retried,
      absl::ToDoubleSeconds(to_admit), absl::ToDoubleSeconds(to_first_token),
      absl::ToDoubleSeconds(to_serve));
}

}  // namespace
}  // namespace weft::e2e

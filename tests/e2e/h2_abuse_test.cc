// End to end, real processes: HTTP/2 abuse at the public gRPC port, with a raw h2 client
// (tests/e2e/h2_raw_client.py: frames written by hand, what grpcio will not send).
//  * the drain sends GOAWAY at once: a client connected to the public port gets a
//    GOAWAY frame right after SIGTERM while a stream is still running, and that stream
//    still finishes whole (before: the GOAWAY came only once every stream had ended);
//  * behind the shipped proxy (deploy/proxy/haproxy.cfg, Debian's HAProxy), three
//    rapid-reset floods (CVE-2023-44487's pattern: HEADERS then RST_STREAM, 20,000
//    streams on one connection each) and a 64 KiB header block leave the scheduler's
//    memory bounded and a normal call through the proxy is served right after (before
//    the proxy waited for each stream's first message, the floods went through and the
//    scheduler grew by ~100 MiB each). The same flood sent straight
//    to the scheduler (gRPC 1.51.1) is measured and printed, not asserted: that is the
//    advisory left open, and why deploy/README.md says not to expose the port directly.
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "tests/e2e/process_harness.h"

namespace weft::e2e {
namespace {

constexpr char kPython[] = "/usr/bin/python3";
constexpr char kHaproxy[] = "/usr/sbin/haproxy";


RunResult H2(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {kPython, "-I", Runfile("tests/e2e/h2_raw_client.py")};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunToEnd(argv, absl::Seconds(120));
}

class H2AbuseE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is needed";
    model_ = testing::FindModelFile();
    if (model_.empty()) GTEST_SKIP() << "no model file (tools/bootstrap.sh)";
  }
  std::string model_;
};

TEST_F(H2AbuseE2eTest, TheDrainSendsGoawayAtOnceAndRunningStreamsFinish) {
  Cluster cluster(model_);
  ASSERT_TRUE(cluster.StartScheduler({"--drain_timeout_s=120"}).ok()) << cluster.Logs();
  WorkerSpec w;
  w.extra_flags = {"--backend=null", "--null_step_ms=20"};
  ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();
  // The raw client connects first (a Python start can take seconds on a loaded
  // machine), then a stream of 200 steps of 20 ms (4 s) starts, and the SIGTERM follows
  // its second token: the GOAWAY is due at once, well within the stream's 4 s.
  const std::string out = cluster.dir() + "/goaway.out";
  auto client = ChildProcess::Start({kPython, "-I", Runfile("tests/e2e/h2_raw_client.py"), "goaway",
                                     absl::StrCat("--port=", cluster.port()), "--timeout=60"},
                                    cluster.dir() + "/goaway.log", out);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(ReadFile(out), "connected"); },
                      absl::Seconds(30)));
  BackgroundStream running(cluster.stub(), GreedyRequest("The capital of France is", 200));
  ASSERT_TRUE(running.WaitTokens(2)) << cluster.Logs();
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(cluster.scheduler()->Signal(SIGTERM));
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(ReadFile(out), "goaway"); }, absl::Seconds(60)))
      << ReadFile(out) << cluster.Logs();
  const absl::Duration to_goaway = absl::Now() - t0;
  EXPECT_FALSE(running.done()) << "the GOAWAY came only after the streams ended";
  EXPECT_TRUE(absl::StrContains(ReadFile(out), "goaway last_stream=")) << ReadFile(out);
  StreamResult r = running.Join();
  EXPECT_TRUE(r.status.ok()) << r.status.error_message() << cluster.Logs();
  EXPECT_EQ(r.token_ids.size(), 200u);
  ASSERT_TRUE(cluster.scheduler()->Wait(absl::Seconds(60)).has_value());
  EXPECT_EQ(cluster.scheduler()->exit_code(), 0) << cluster.Logs();
  std::cout << "RELIABILITY SIGTERM: GOAWAY on an idle public connection in "
            << absl::FormatDuration(to_goaway) << " with a stream still running" << std::endl;
}

TEST_F(H2AbuseE2eTest, TheProxyAbsorbsRapidResetAndHugeHeadersAndTheSchedulerServes) {
  if (::access(kHaproxy, X_OK) != 0) GTEST_SKIP() << kHaproxy << " not found (tools/bootstrap.sh)";
  Cluster cluster(model_);
  ASSERT_TRUE(cluster.StartScheduler({"--model_name=alpha"}).ok()) << cluster.Logs();
  WorkerSpec w;
  w.extra_flags = {"--backend=null"};
  ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();
  const std::string models_cfg = cluster.dir() + "/models.cfg";
  std::ofstream(models_cfg) << "backend model:alpha\n  server scheduler " << cluster.address() << "\n";
  HaproxyPorts ports;
  auto proxy = StartShippedHaproxy(kHaproxy, models_cfg, /*http=*/false,
                                   cluster.dir() + "/haproxy.log", &ports);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  const int proxy_port = ports.grpc;
  auto stub = weft::v1::Generation::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", proxy_port), grpc::InsecureChannelCredentials()));
  auto call = [&] {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-weft-model", "alpha");
    return Generate(stub.get(), GreedyRequest("The capital of France is", 4), absl::Seconds(30), {},
                    &ctx);
  };
  ASSERT_TRUE(WaitFor([&] { return call().status.ok(); }, absl::Seconds(60)))
      << (*proxy)->LogTail();

  const pid_t sched = cluster.scheduler()->pid();
  const int64_t before = RssKib(sched);
  const absl::Time t0 = absl::Now();
  RunResult flood;
  for (int i = 0; i < 3; ++i) {  // repeated: a leak per stream would add up
    flood = H2({"rapid-reset", absl::StrCat("--port=", proxy_port), "--streams=20000",
                "--model=alpha"});
    ASSERT_EQ(flood.code, 0) << flood.log;
    EXPECT_TRUE(absl::StrContains(flood.out, "sent=20000")) << flood.out;
  }
  const absl::Duration flood_time = absl::Now() - t0;
  StreamResult after_flood = call();
  EXPECT_TRUE(after_flood.status.ok()) << after_flood.status.error_message() << (*proxy)->LogTail();
  EXPECT_EQ(after_flood.token_ids.size(), 4u);
  const int64_t after = RssKib(sched);
  // Before the proxy waited for a message, three floods grew it by ~300 MiB.
  EXPECT_LT(after - before, 32 * 1024) << before << " -> " << after << " KiB";
  std::cout << "RELIABILITY rapid reset 3 x 20000 via HAProxy: " << absl::StripAsciiWhitespace(flood.out)
            << " (" << absl::FormatDuration(flood_time) << "); scheduler RSS " << before << " -> "
            << after << " KiB; a normal call OK after" << std::endl;

  RunResult big = H2({"big-headers", absl::StrCat("--port=", proxy_port), "--bytes=65536",
                      "--model=alpha"});
  ASSERT_EQ(big.code, 0) << big.log;
  EXPECT_FALSE(absl::StrContains(big.out, "grpc-status.0")) << big.out;
  EXPECT_TRUE(call().status.ok());
  std::cout << "RELIABILITY 64 KiB header block via HAProxy: " << absl::StripAsciiWhitespace(big.out)
            << "; scheduler RSS " << RssKib(sched) << " KiB" << std::endl;

  // The same flood straight at the scheduler: measured, not asserted (the open advisory).
  const int64_t direct_before = RssKib(sched);
  RunResult direct = H2({"rapid-reset", absl::StrCat("--port=", cluster.port()), "--streams=20000"});
  std::cout << "RELIABILITY rapid reset x20000 straight at the scheduler: "
            << absl::StripAsciiWhitespace(direct.out) << "; scheduler RSS " << direct_before
            << " -> " << RssKib(sched) << " KiB" << std::endl;
  EXPECT_TRUE(call().status.ok()) << "the scheduler still serves";
}

}  // namespace
}  // namespace weft::e2e

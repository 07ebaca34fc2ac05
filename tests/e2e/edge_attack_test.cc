// End to end, real processes: hostile HTTP clients against weft-scheduler's OpenAI port
// (--http_port) and its metrics/probe port, from outside (tests/e2e/edge_attack.py,
// stdlib Python over sockets). Each attack must be refused with its status (413 for a
// 64 MiB chunked body, 415 for a gzip bomb, 431 for 1 MiB of headers or 2,000 fields,
// 408 for a trickled head, 503 past --http_max_connections, 400 for a 3.4 MB object of
// distinct keys), /livez must answer while either port is under slowloris, the
// scheduler's memory must stay bounded (VmHWM over the attack vs VmRSS before it, from
// /proc), and a normal request must be served right after each; then a real completion
// is served, and once a drain begins (SIGTERM) every answer carries Connection: close.
// Time bounds in the script are hang guards; the rows it prints (status, seconds,
// memory) are the figures of issue 30's note.
#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "tests/e2e/process_harness.h"

namespace weft::e2e {
namespace {

constexpr char kPython[] = "/usr/bin/python3";

RunResult Attack(Cluster& c, std::vector<std::string> phases) {
  std::vector<std::string> argv = {kPython,
                                   "-I",
                                   Runfile("tests/e2e/edge_attack.py"),
                                   absl::StrCat("--pid=", c.scheduler()->pid()),
                                   absl::StrCat("--http_port=", c.http_port()),
                                   absl::StrCat("--metrics_port=", c.metrics_port()),
                                   "--hold=16",
                                   "--trickle=8"};
  argv.insert(argv.end(), phases.begin(), phases.end());
  return RunToEnd(argv, absl::Minutes(5));
}

TEST(EdgeAttackE2eTest, HostileClientsAreRefusedAndTheEdgeKeepsServing) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is needed";
  const std::string model = testing::FindModelFile();
  if (model.empty()) GTEST_SKIP() << "default model not found (run tools/bootstrap.sh)";
  Cluster c(model);
  ASSERT_TRUE(c.StartScheduler({"--http_port=0", "--http_max_connections=16",
                                "--http_request_timeout_s=3", "--drain_timeout_s=60"})
                  .ok())
      << c.Logs();
  WorkerSpec w;
  w.num_kv_blocks = 64;
  w.threads = 2;
  ASSERT_TRUE(c.StartWorker(w).ok()) << c.Logs();
  ASSERT_TRUE(c.WaitReplicas(1).ok()) << c.Logs();

  const RunResult r = Attack(c, {"keepalive", "chunked", "gzip", "headers", "fields",
                                 "slowloris_http", "slowloris_metrics", "connections",
                                 "json_keys", "completion"});
  std::cout << r.out << std::flush;  // the rows (figures for the note)
  EXPECT_EQ(r.code, 0) << r.out << r.log << c.Logs();
  EXPECT_TRUE(absl::StrContains(r.log, "edge_attack: ok")) << r.log;

  // A drain: a stream keeps the scheduler draining while the answers are checked.
  BackgroundStream busy(c.stub(), GreedyRequest("Once upon a time", 900));
  for (int i = 0; i < 2400 && busy.num_tokens() == 0 && !busy.done(); ++i) {
    absl::SleepFor(absl::Milliseconds(50));  // until the stream is generating (hang guard)
  }
  ASSERT_GT(busy.num_tokens(), 0) << c.Logs();
  ASSERT_TRUE(c.scheduler()->Signal(SIGTERM));
  const RunResult d = Attack(c, {"drain"});
  std::cout << d.out << std::flush;
  EXPECT_EQ(d.code, 0) << d.out << d.log << c.Logs();
  busy.Cancel();
}

}  // namespace
}  // namespace weft::e2e

// The e2e harness's own guarantees, without the model: child processes never outlive
// the test (destructor, and PR_SET_PDEATHSIG when the test process itself dies), exit
// codes are reported, and /metrics pages parse.
#include "tests/e2e/process_harness.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>

#include "gtest/gtest.h"

namespace weft::e2e {
namespace {

bool Alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

// Alive and not a zombie (an orphan's zombie waits for whoever adopted it to reap it).
bool Running(pid_t pid) {
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

TEST(ChildProcessTest, DestructorKillsAndReaps) {
  const std::string dir = MakeTempDir("harness-");
  pid_t pid = 0;
  {
    auto p = ChildProcess::Start({"/bin/sleep", "1000"}, dir + "/sleep.log");
    ASSERT_TRUE(p.ok()) << p.status();
    pid = (*p)->pid();
    EXPECT_TRUE((*p)->Running());
  }
  EXPECT_FALSE(Alive(pid));  // killed and reaped: not even a zombie
}

TEST(ChildProcessTest, ReportsExitCodesSignalsAndOutput) {
  const std::string dir = MakeTempDir("harness-");
  auto p = ChildProcess::Start({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, dir + "/log",
                               dir + "/stdout");
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)->Wait(absl::Seconds(30)).has_value());
  EXPECT_EQ((*p)->exit_code(), 3);
  EXPECT_EQ(ReadFile(dir + "/stdout"), "out\n");
  EXPECT_EQ((*p)->LogTail(), "err\n");

  auto q = ChildProcess::Start({"/bin/sleep", "1000"}, dir + "/q.log");
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE((*q)->Wait(absl::Milliseconds(50)).has_value());
  ASSERT_TRUE((*q)->Signal(SIGTERM));
  ASSERT_TRUE((*q)->Wait(absl::Seconds(30)).has_value());
  EXPECT_EQ((*q)->exit_code(), 128 + SIGTERM);
  EXPECT_FALSE((*q)->Signal(SIGTERM));  // reaped: no signal to a recycled pid

  EXPECT_FALSE(ChildProcess::Start({"/no/such/binary"}, dir + "/x.log").ok());
}

// The process state letter of /proc/pid/stat ('?' when unreadable).
char State(pid_t pid) {
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : '?';
}

TEST(ChildProcessTest, PauseStopsTheProcessUntilResumed) {
  const std::string dir = MakeTempDir("harness-");
  auto p = ChildProcess::Start({"/bin/sleep", "1000"}, dir + "/sleep.log");
  ASSERT_TRUE(p.ok()) << p.status();
  const pid_t pid = (*p)->pid();
  {
    ScopedPause pause(p->get());
    ASSERT_TRUE(pause.paused());
    EXPECT_EQ(State(pid), 'T');  // seen stopped when Pause returns, not some time later
    EXPECT_TRUE((*p)->Running());  // stopped is not exited
  }  // resumed here
  EXPECT_TRUE(WaitFor([&] { return State(pid) == 'S'; }, absl::Seconds(30))) << State(pid);
  ASSERT_TRUE((*p)->Signal(SIGKILL));
  ASSERT_TRUE((*p)->Wait(absl::Seconds(30)).has_value());
  EXPECT_FALSE((*p)->Pause(absl::Milliseconds(10)));  // reaped: nothing to pause
}

// A program that exits at once (its port was taken) is started again on fresh ports;
// one that never comes up is reported after the attempts.
TEST(StartOnFreePortsTest, StartsAgainOnFreshPortsWhenTheProgramExits) {
  const std::string dir = MakeTempDir("harness-");
  int starts = 0;
  std::vector<std::vector<int>> seen;
  std::vector<int> ports;
  auto p = StartOnFreePorts(
      2,
      [&](const std::vector<int>& ports) -> std::vector<std::string> {
        seen.push_back(ports);
        return ++starts < 3 ? std::vector<std::string>{"/bin/false"}
                            : std::vector<std::string>{"/bin/sleep", "1000"};
      },
      dir + "/log", [&](const std::vector<int>&) { return starts == 3; }, &ports);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE((*p)->Running());
  EXPECT_EQ(starts, 3);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(ports, seen.back());
  for (const auto& s : seen) {
    ASSERT_EQ(s.size(), 2u);
    EXPECT_GT(s[0], 0);
    EXPECT_GT(s[1], 0);
  }

  auto never = StartOnFreePorts(
      1, [](const std::vector<int>&) -> std::vector<std::string> { return {"/bin/false"}; },
      dir + "/never.log", [](const std::vector<int>&) { return false; }, &ports, 2);
  EXPECT_FALSE(never.ok());
}

// A test process killed outright (Bazel's timeout, a crash) takes its children along.
TEST(ChildProcessTest, ChildrenDieWithTheTestProcess) {
  const std::string dir = MakeTempDir("harness-");
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t test_like = ::fork();
  ASSERT_GE(test_like, 0);
  if (test_like == 0) {
    // Stands in for a test process: starts a long-lived child, reports its pid, waits.
    ::close(fds[0]);
    auto p = ChildProcess::Start({"/bin/sleep", "1000"}, dir + "/grandchild.log");
    const pid_t gc = p.ok() ? (*p)->pid() : -1;
    (void)!::write(fds[1], &gc, sizeof(gc));
    ::pause();
    ::_exit(0);
  }
  ::close(fds[1]);
  pid_t grandchild = -1;
  ASSERT_EQ(::read(fds[0], &grandchild, sizeof(grandchild)), static_cast<ssize_t>(sizeof(grandchild)));
  ::close(fds[0]);
  ASSERT_GT(grandchild, 0);
  EXPECT_TRUE(Running(grandchild));
  ::kill(test_like, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(test_like, &status, 0), test_like);
  // Reparented (to init or a subreaper); the death signal kills it.
  EXPECT_TRUE(WaitFor([&] { return !Running(grandchild); }, absl::Seconds(30)))
      << "pid " << grandchild << " outlived the test process";
}

TEST(MetricsPageTest, ParsesSeriesLabelsAndSums) {
  MetricsPage m = MetricsPage::Parse(
      "# HELP weft_steps_total Steps.\n"
      "# TYPE weft_steps_total counter\n"
      "weft_steps_total{replica=\"r0\"} 12\n"
      "weft_steps_total{replica=\"r1\"} 30\n"
      "weft_kv_blocks_used 0\n"
      "weft_requests_status_total{code=\"OK\",note=\"a b\"} 7 1700000000\n"
      "weft_ttft_seconds_bucket{le=\"+Inf\"} 3\n"
      "weft_ratio 2.5e-1\n");
  EXPECT_EQ(m.Get("weft_steps_total{replica=\"r0\"}"), 12);
  EXPECT_EQ(m.Sum("weft_steps_total"), 42);
  EXPECT_TRUE(m.Has("weft_kv_blocks_used"));
  EXPECT_EQ(m.Get("weft_kv_blocks_used", -1), 0);
  EXPECT_EQ(m.Get("weft_missing", -1), -1);
  EXPECT_EQ(m.Get("weft_requests_status_total{code=\"OK\",note=\"a b\"}"), 7);
  EXPECT_EQ(m.Get("weft_ttft_seconds_bucket{le=\"+Inf\"}"), 3);
  EXPECT_DOUBLE_EQ(m.Get("weft_ratio"), 0.25);
  EXPECT_EQ(m.Sum("weft_steps"), 0);  // a prefix of a name is not the name
  EXPECT_TRUE(m.models().empty());
}

TEST(MetricsPageTest, KeysLeaveOutTheModelLabel) {
  MetricsPage m = MetricsPage::Parse(
      "weft_replicas{model=\"smol\"} 2\n"
      "weft_steps_total{model=\"smol\",replica=\"r0\"} 12\n"
      "weft_requests_status_total{code=\"OK\",model=\"smol\"} 7\n"
      "weft_e2e_request_latency_seconds_bucket{model=\"smol\",le=\"+Inf\"} 3\n"
      "weft_odd{note=\"a \\\"q\\\", model=x\",model=\"smol\"} 5\n"
      "weft_worker_attached 1\n");
  EXPECT_EQ(m.Get("weft_replicas", -1), 2);
  EXPECT_EQ(m.Get("weft_steps_total{replica=\"r0\"}"), 12);
  EXPECT_EQ(m.Get("weft_requests_status_total{code=\"OK\"}"), 7);
  EXPECT_EQ(m.Get("weft_e2e_request_latency_seconds_bucket{le=\"+Inf\"}"), 3);
  EXPECT_EQ(m.Get("weft_odd{note=\"a \\\"q\\\", model=x\"}"), 5);
  EXPECT_EQ(m.Get("weft_worker_attached"), 1);
  EXPECT_EQ(m.models(), std::set<std::string>{"smol"});
  EXPECT_EQ(m.model_labelled_series(), 5);
  EXPECT_EQ(m.num_series(), 6);
}

}  // namespace
}  // namespace weft::e2e

#include "worker/comm/testing/fork_ranks.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace weft {
namespace testing {

std::vector<pid_t> ForkRanks(int world_size, const std::function<int(int rank)>& fn) {
  std::vector<pid_t> pids;
  std::fflush(nullptr);  // children must not re-flush the parent's buffers
  for (int r = 0; r < world_size; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      std::abort();
    }
    if (pid == 0) {
      const int code = fn(r);
      std::fflush(nullptr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  return pids;
}

std::string ChildResult::Describe() const {
  if (timed_out) return "timed out (killed by the test)";
  if (exited) return absl::StrCat("exit code ", exit_code);
  return absl::StrCat("killed by signal ", term_signal);
}

ChildResult WaitForChild(pid_t pid, absl::Time deadline) {
  ChildResult result;
  int status = 0;
  while (true) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0) return result;  // not our child, or already reaped
    if (absl::Now() >= deadline) {
      result.timed_out = true;
      kill(pid, SIGKILL);
      kill(pid, SIGCONT);
      waitpid(pid, &status, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  if (WIFEXITED(status)) {
    result.exited = true;
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.term_signal = WTERMSIG(status);
  }
  if (result.timed_out) result.exited = false;
  return result;
}

std::vector<ChildResult> WaitForChildren(const std::vector<pid_t>& pids, absl::Time deadline) {
  std::vector<ChildResult> results;
  for (pid_t pid : pids) results.push_back(WaitForChild(pid, deadline));
  return results;
}

std::string RunRanks(int world_size, const std::function<int(int rank)>& fn,
                     absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const std::vector<ChildResult> results = WaitForChildren(ForkRanks(world_size, fn), deadline);
  std::string failures;
  for (int r = 0; r < world_size; ++r) {
    if (!results[r].ok()) absl::StrAppend(&failures, "rank ", r, ": ", results[r].Describe(), "\n");
  }
  return failures;
}

std::string UniqueName(const std::string& prefix) {
  // Not the pid alone: sandboxed test runs have their own PID namespaces (every run is
  // pid 12) but share /dev/shm.
  static const uint64_t nonce = std::random_device()();
  static std::atomic<int> counter{0};
  return absl::StrCat(prefix, "-", getpid(), "-", absl::Hex(nonce), "-", counter.fetch_add(1));
}

PipeEvents::PipeEvents() {
  if (pipe(fds_) != 0) std::perror("pipe");
}

PipeEvents::~PipeEvents() {
  close(fds_[0]);
  close(fds_[1]);
}

void PipeEvents::Signal() const { (void)!write(fds_[1], "e", 1); }

bool PipeEvents::WaitFor(int n, absl::Time deadline) const {
  for (char c; n > 0; --n) {
    pollfd p{fds_[0], POLLIN, 0};
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (ms <= 0 || poll(&p, 1, ms) != 1 || read(fds_[0], &c, 1) != 1) return false;
  }
  return true;
}

}  // namespace testing
}  // namespace weft

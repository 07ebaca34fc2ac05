// Test helpers that run the ranks of a group as forked child processes.
//
// A child runs its function and leaves with _exit(return value): no atexit handlers, no
// gtest teardown, no destructors of the parent's statics. Failures reach the parent's
// gtest as exit codes (ChildResult). Children never outlive the parent's wait: those
// still running at the deadline are SIGKILLed (a hang guard, reported as timed_out).
// Thread-safety: call from the test's main thread; fork before starting threads.
#ifndef WEFT_WORKER_COMM_TESTING_FORK_RANKS_H_
#define WEFT_WORKER_COMM_TESTING_FORK_RANKS_H_

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace weft {
namespace testing {

// Forks one child per rank in [0, world_size); child r runs fn(r) and _exit()s with its
// return value. Returns the pids in rank order.
std::vector<pid_t> ForkRanks(int world_size, const std::function<int(int rank)>& fn);

struct ChildResult {
  int exit_code = -1;    // valid when exited
  int term_signal = 0;   // signal that ended it, 0 if it exited
  bool exited = false;
  bool timed_out = false;  // still running at the deadline: killed by the helper

  bool ok() const { return exited && exit_code == 0; }
  std::string Describe() const;
};

// Reaps `pid`, waiting until `deadline`; SIGKILLs and reaps it after that.
ChildResult WaitForChild(pid_t pid, absl::Time deadline);

// Reaps every pid (in order) with one shared deadline.
std::vector<ChildResult> WaitForChildren(const std::vector<pid_t>& pids, absl::Time deadline);

// ForkRanks + WaitForChildren. Returns "" when every rank exited 0, else one line per
// failed rank.
std::string RunRanks(int world_size, const std::function<int(int rank)>& fn,
                     absl::Duration timeout);

// A name unique to this process and call, for shm segments.
std::string UniqueName(const std::string& prefix);

// Events between forked processes (and threads) over a pipe made before the fork: Signal
// writes one byte, WaitFor(n) takes n of them. What a test waits for instead of sleeping
// until "the other side got there".
class PipeEvents {
 public:
  PipeEvents();
  ~PipeEvents();
  PipeEvents(const PipeEvents&) = delete;
  PipeEvents& operator=(const PipeEvents&) = delete;

  void Signal() const;
  // True once `n` signals arrived (false at the deadline, a hang guard).
  bool WaitFor(int n, absl::Time deadline) const;

 private:
  int fds_[2] = {-1, -1};
};

}  // namespace testing
}  // namespace weft

#endif  // WEFT_WORKER_COMM_TESTING_FORK_RANKS_H_

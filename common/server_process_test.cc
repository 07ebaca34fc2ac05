#include "common/server_process.h"

#include <signal.h>
#include <unistd.h>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

// The signals are blocked (as InitServerProcess does), so a SIGTERM waits until taken.
TEST(ServerProcessTest, WaitForStopSignalTakesAPendingSignalOrTimesOut) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &set, nullptr), 0);
  EXPECT_EQ(WaitForStopSignal(absl::Milliseconds(10)), 0);
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);
  EXPECT_EQ(WaitForStopSignal(absl::Seconds(30)), SIGTERM);
  ASSERT_EQ(kill(getpid(), SIGINT), 0);
  EXPECT_EQ(WaitForStopSignal(), SIGINT);
}

// Abseil's deadlock detector (on in Debian's build) aborts on a lock-order inversion;
// after InitServerProcess it is off (a server does not pay for it on every lock).
TEST(ServerProcessDeathTest, InitServerProcessTurnsOffAbslDeadlockDetection) {
  auto invert = [] {
    absl::Mutex a, b;
    a.Lock();
    b.Lock();
    b.Unlock();
    a.Unlock();
    b.Lock();
    a.Lock();
    a.Unlock();
    b.Unlock();
  };
  EXPECT_DEATH(
      {
        absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kAbort);
        invert();
      },
      "deadlock");
  char arg0[] = "server_process_test";
  char* argv[] = {arg0, nullptr};
  InitServerProcess(1, argv, "test");
  invert();  // survives
}

}  // namespace
}  // namespace weft

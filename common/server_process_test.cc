#include "common/server_process.h"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

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

// kBatch is the calling thread's class and the class of the threads it starts after
// (gRPC's, in a server); kNormal puts a thread back, and its later threads with it.
TEST(ServerProcessTest, ThreadClassIsPerThreadAndInherited) {
  int in_thread = -1;
  std::thread([&] {
    ASSERT_TRUE(SetThisThreadClass(ThreadClass::kBatch).ok());
    EXPECT_EQ(sched_getscheduler(0), SCHED_BATCH);
    std::thread([&] { in_thread = sched_getscheduler(0); }).join();
    EXPECT_EQ(in_thread, SCHED_BATCH);
    ASSERT_TRUE(SetThisThreadClass(ThreadClass::kNormal).ok());
    EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);
    std::thread([&] { in_thread = sched_getscheduler(0); }).join();
    EXPECT_EQ(in_thread, SCHED_OTHER);
  }).join();
  EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);  // the test's own thread never changed
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

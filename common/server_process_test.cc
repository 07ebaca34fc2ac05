#include "common/server_process.h"

#include <signal.h>
#include <unistd.h>

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

}  // namespace
}  // namespace weft

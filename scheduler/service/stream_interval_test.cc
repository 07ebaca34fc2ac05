#include "scheduler/service/stream_interval.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

StreamInterval Policy(int tokens, int min_streams, int max_hold_ms) {
  StreamIntervalOptions o;
  o.tokens = tokens;
  o.min_streams = min_streams;
  o.max_hold = absl::Milliseconds(max_hold_ms);
  EXPECT_TRUE(o.Validate().ok());
  return StreamInterval(o);
}

TEST(StreamIntervalTest, SmallBatchesNeverHold) {
  const StreamInterval p = Policy(4, 64, 25);
  EXPECT_FALSE(p.Hold(1, 1, absl::Milliseconds(1)));
  EXPECT_FALSE(p.Hold(63, 1, absl::Milliseconds(1)));
  EXPECT_TRUE(p.Hold(64, 1, absl::Milliseconds(1)));
  EXPECT_TRUE(p.Hold(256, 3, absl::Milliseconds(1)));
}

TEST(StreamIntervalTest, HoldsUpToTheIntervalThenReleases) {
  const StreamInterval p = Policy(4, 1, 25);
  EXPECT_TRUE(p.Hold(1, 1, absl::ZeroDuration()));
  EXPECT_TRUE(p.Hold(1, 3, absl::ZeroDuration()));
  EXPECT_FALSE(p.Hold(1, 4, absl::ZeroDuration()));
  EXPECT_FALSE(p.Hold(1, 9, absl::ZeroDuration())) << "a merged lagging message";
}

TEST(StreamIntervalTest, SlowStepsNeverHold) {
  const StreamInterval p = Policy(4, 1, 30);
  EXPECT_TRUE(p.Hold(100, 1, absl::Milliseconds(10))) << "3 gaps of 10 ms fit in 30";
  EXPECT_FALSE(p.Hold(100, 1, absl::Milliseconds(11)));
  EXPECT_FALSE(p.Hold(100, 1, absl::InfiniteDuration())) << "no previous token";
}

TEST(StreamIntervalTest, OneTokenIntervalNeverHolds) {
  const StreamInterval p = Policy(1, 1, 1000);
  EXPECT_FALSE(p.enabled());
  EXPECT_FALSE(p.Hold(1000, 0, absl::ZeroDuration()));
}

TEST(StreamIntervalTest, OverdueAfterMaxHold) {
  const StreamInterval p = Policy(4, 64, 25);
  const absl::Time t0 = absl::FromUnixSeconds(100);
  EXPECT_FALSE(p.Overdue(t0, t0 + absl::Milliseconds(24)));
  EXPECT_TRUE(p.Overdue(t0, t0 + absl::Milliseconds(25)));
}

TEST(StreamIntervalTest, ValidateRefusesNonsense) {
  StreamIntervalOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.tokens = 0;
  EXPECT_FALSE(o.Validate().ok());
  o = {};
  o.min_streams = 0;
  EXPECT_FALSE(o.Validate().ok());
  o = {};
  o.max_hold = absl::Milliseconds(-1);
  EXPECT_FALSE(o.Validate().ok());
}

}  // namespace
}  // namespace weft

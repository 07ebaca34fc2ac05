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
  const absl::Duration none = absl::ZeroDuration();
  EXPECT_FALSE(p.Hold(1, 1, absl::Milliseconds(1), none));
  EXPECT_FALSE(p.Hold(63, 1, absl::Milliseconds(1), none));
  EXPECT_TRUE(p.Hold(64, 1, absl::Milliseconds(1), none));
  EXPECT_TRUE(p.Hold(256, 3, absl::Milliseconds(1), none));
}

TEST(StreamIntervalTest, HoldsUpToTheIntervalThenReleases) {
  const StreamInterval p = Policy(4, 1, 25);
  const absl::Duration zero = absl::ZeroDuration();
  EXPECT_TRUE(p.Hold(1, 1, zero, zero));
  EXPECT_TRUE(p.Hold(1, 3, zero, zero));
  EXPECT_FALSE(p.Hold(1, 4, zero, zero));
  EXPECT_FALSE(p.Hold(1, 9, zero, zero)) << "a merged lagging message";
}

TEST(StreamIntervalTest, SlowStepsNeverHold) {
  for (int tokens : {4, 8, 16}) {
    SCOPED_TRACE(tokens);
    const StreamInterval p = Policy(tokens, 1, 30);
    const absl::Duration none = absl::ZeroDuration();
    EXPECT_TRUE(p.Hold(100, 1, absl::Milliseconds(10), none)) << "3 gaps of 10 ms fit in 30";
    EXPECT_FALSE(p.Hold(100, 1, absl::Milliseconds(11), none));
    EXPECT_FALSE(p.Hold(100, 1, absl::InfiniteDuration(), none)) << "no previous token";
  }
  // Intervals under 4 tokens need only their own gaps to fit.
  EXPECT_TRUE(Policy(2, 1, 30).Hold(100, 1, absl::Milliseconds(30), absl::ZeroDuration()));
  EXPECT_FALSE(Policy(2, 1, 30).Hold(100, 1, absl::Milliseconds(31), absl::ZeroDuration()));
  EXPECT_TRUE(Policy(3, 1, 30).Hold(100, 1, absl::Milliseconds(15), absl::ZeroDuration()));
  EXPECT_FALSE(Policy(3, 1, 30).Hold(100, 1, absl::Milliseconds(16), absl::ZeroDuration()));
}

// A hold ends when the next token would make the oldest held one wait past max_hold,
// not at one slow gap: fast steps with jitter still fill the interval.
TEST(StreamIntervalTest, HoldsWhileTheNextTokenIsExpectedInTime) {
  const StreamInterval p = Policy(8, 1, 25);
  const auto ms = [](int n) { return absl::Milliseconds(n); };
  EXPECT_TRUE(p.Hold(100, 5, ms(2), ms(20))) << "20 + 2 <= 25";
  EXPECT_TRUE(p.Hold(100, 5, ms(2), ms(23)));
  EXPECT_FALSE(p.Hold(100, 5, ms(2), ms(24))) << "24 + 2 > 25: the next token would be late";
  EXPECT_TRUE(p.Hold(100, 3, ms(6), ms(10))) << "one slower gap (7 x 6 ms > 25) in a fast run";
  EXPECT_FALSE(p.Hold(100, 3, ms(9), ms(10))) << "3 gaps of 9 ms do not fit: slow";
  EXPECT_FALSE(p.Hold(100, 8, ms(1), ms(1))) << "the interval is full";
}

TEST(StreamIntervalTest, OneTokenIntervalNeverHolds) {
  const StreamInterval p = Policy(1, 1, 1000);
  EXPECT_FALSE(p.enabled());
  EXPECT_FALSE(p.Hold(1000, 0, absl::ZeroDuration(), absl::ZeroDuration()));
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

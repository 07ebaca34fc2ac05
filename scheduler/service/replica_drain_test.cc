#include "scheduler/service/replica_drain.h"

#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(ReplicaDrainsTest, KeepsTheFirstDeadlineAndReportsExpiredOnes) {
  ReplicaDrains d(absl::Seconds(10));
  const absl::Time t0 = absl::FromUnixSeconds(100);
  EXPECT_EQ(d.NextDeadline(), absl::InfiniteFuture());
  EXPECT_TRUE(d.Begin("a", t0));
  EXPECT_FALSE(d.Begin("a", t0 + absl::Seconds(5))) << "a second request changes nothing";
  EXPECT_TRUE(d.Begin("b", t0 + absl::Seconds(3)));
  EXPECT_TRUE(d.Contains("a"));
  EXPECT_EQ(d.size(), 2u);
  EXPECT_EQ(d.NextDeadline(), t0 + absl::Seconds(10));
  EXPECT_TRUE(d.Expired(t0 + absl::Seconds(9)).empty());
  EXPECT_EQ(d.Expired(t0 + absl::Seconds(10)), std::vector<std::string>{"a"});
  EXPECT_EQ(d.Expired(t0 + absl::Seconds(13)), (std::vector<std::string>{"a", "b"}));
  d.End("a");
  d.End("unknown");
  EXPECT_FALSE(d.Contains("a"));
  EXPECT_EQ(d.NextDeadline(), t0 + absl::Seconds(13));
}

}  // namespace
}  // namespace weft

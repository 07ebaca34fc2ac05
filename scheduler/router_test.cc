#include "scheduler/router.h"

#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace {

RouteCandidate C(int32_t id, int32_t hit, int64_t free, bool fits = true) {
  RouteCandidate c;
  c.replica = ReplicaId(id);
  c.prefix_hit_blocks = hit;
  c.free_blocks = free;
  c.fits = fits;
  return c;
}

TEST(RouterTest, NoCandidates) { EXPECT_EQ(PickReplica({}), std::nullopt); }

TEST(RouterTest, MostFreeBlocks) {
  std::vector<RouteCandidate> c = {C(1, 0, 10), C(2, 0, 30), C(3, 0, -5)};
  EXPECT_EQ(PickReplica(c), ReplicaId(2));
}

TEST(RouterTest, APrefixHitCountsAsTheBlocksItSaves) {
  // Similar load: the hits decide (2 and 3 both leave 101 blocks; 2 has the longer hit).
  std::vector<RouteCandidate> close = {C(1, 0, 100), C(2, 3, 98), C(3, 2, 99)};
  EXPECT_EQ(PickReplica(close), ReplicaId(2));
  // A much less loaded replica wins over a hit (a new or idle replica takes the queue).
  std::vector<RouteCandidate> busy = {C(1, 0, 1000), C(2, 3, 10), C(3, 2, 500)};
  EXPECT_EQ(PickReplica(busy), ReplicaId(1));
}

TEST(RouterTest, TiesGoToTheLongerHitThenTheLowestId) {
  std::vector<RouteCandidate> hit = {C(1, 0, 12), C(2, 2, 10)};
  EXPECT_EQ(PickReplica(hit), ReplicaId(2));
  std::vector<RouteCandidate> c = {C(4, 1, 10), C(2, 1, 10), C(3, 1, 10)};
  EXPECT_EQ(PickReplica(c), ReplicaId(2));
}

TEST(RouterTest, NeverPicksAReplicaTooSmall) {
  std::vector<RouteCandidate> c = {C(1, 9, 1000, /*fits=*/false), C(2, 0, 1)};
  EXPECT_EQ(PickReplica(c), ReplicaId(2));
  std::vector<RouteCandidate> none = {C(1, 9, 1000, false)};
  EXPECT_EQ(PickReplica(none), std::nullopt);
}

}  // namespace
}  // namespace weft

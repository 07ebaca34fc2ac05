#include "worker/thread_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(ThreadPoolTest, RunOnAllRunsEachThreadOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int round = 0; round < 200; ++round) {
      std::vector<std::atomic<int>> hits(threads);
      pool.RunOnAll([&](int t) { hits[t].fetch_add(1); });
      for (int t = 0; t < threads; ++t) ASSERT_EQ(hits[t].load(), 1);
    }
  }
}

TEST(ThreadPoolTest, ParallelForCoversTheRangeOnceWithAlignedBoundaries) {
  ThreadPool pool(3);
  for (int64_t n : {1, 5, 16, 17, 100, 1000}) {
    for (int64_t align : {1, 4, 16}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, align, [&](int64_t b, int64_t e) {
        EXPECT_EQ(b % align, 0);
        EXPECT_TRUE(e == n || e % align == 0);
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << n << " " << align;
    }
  }
}

TEST(ThreadPoolTest, DynamicCoversEveryItemOnce) {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> hits(777);
  pool.ParallelForDynamic(777, [&](int64_t i) { hits[i].fetch_add(1); });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

// Waits for `pred` by yielding (the pool's own threads must run to make it true).
template <typename Pred>
void YieldUntil(Pred pred) {
  while (!pred()) std::this_thread::yield();
}

TEST(ThreadPoolTest, WakesSleepingWorkersAndShutsDown) {
  ThreadPool pool(3);
  for (int round = 0; round < 3; ++round) {
    YieldUntil([&] { return pool.num_asleep_for_job() == 2; });  // both workers asleep
    std::atomic<int> sum{0};
    pool.RunOnAll([&](int t) { sum.fetch_add(t + 1); });
    EXPECT_EQ(sum.load(), 6);
  }
  // A slow worker keeps the caller waiting until it fell asleep for the region's end.
  std::atomic<int> sum{0};
  pool.RunOnAll([&](int t) {
    if (t == 1) YieldUntil([&] { return pool.num_asleep_for_region_end() == 1; });
    sum.fetch_add(1);
  });
  EXPECT_EQ(sum.load(), 3);
}

}  // namespace
}  // namespace weft

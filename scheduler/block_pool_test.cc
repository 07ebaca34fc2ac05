#include "scheduler/block_pool.h"

#include <algorithm>
#include <list>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gmock/gmock.h"
#include "glog/logging.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

using ::testing::ElementsAre;

BlockPoolOptions Opts(int32_t n) {
  BlockPoolOptions o;
  o.num_blocks = n;
  return o;
}

BlockPool MakePool(int32_t n) {
  auto pool = BlockPool::Create(Opts(n));
  CHECK(pool.ok()) << pool.status();
  return std::move(*pool);
}

TEST(BlockPoolTest, RejectsEmptyPool) {
  EXPECT_EQ(BlockPool::Create(Opts(0)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(BlockPoolTest, AllocateUntilEmptyThenValue) {
  BlockPool pool = MakePool(3);
  EXPECT_EQ(pool.Allocate(), BlockId(0));
  EXPECT_EQ(pool.Allocate(), BlockId(1));
  EXPECT_EQ(pool.Allocate(), BlockId(2));
  EXPECT_EQ(pool.Allocate(), std::nullopt);
  EXPECT_EQ(pool.num_referenced(), 3);
  pool.Release(BlockId(1));
  EXPECT_EQ(pool.Allocate(), BlockId(1));
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, AllocateNIsAllOrNothing) {
  BlockPool pool = MakePool(4);
  std::vector<BlockId> out;
  EXPECT_FALSE(pool.AllocateN(5, &out));
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_TRUE(pool.AllocateN(4, &out));
  EXPECT_EQ(out.size(), 4u);
  EXPECT_EQ(pool.num_free(), 0);
}

TEST(BlockPoolTest, RefCountsShareAndRelease) {
  BlockPool pool = MakePool(2);
  BlockId b = *pool.Allocate();
  pool.AddRef(b);
  pool.AddRef(b);
  EXPECT_EQ(pool.ref_count(b), 3);
  pool.Release(b);
  pool.Release(b);
  EXPECT_EQ(pool.num_referenced(), 1);
  pool.Release(b);
  EXPECT_EQ(pool.num_referenced(), 0);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, ReleasedHashedBlockStaysCachedAndIsReused) {
  BlockPool pool = MakePool(2);
  BlockId b = *pool.Allocate();
  ASSERT_TRUE(pool.SetHash(b, 42));
  pool.Release(b);
  EXPECT_EQ(pool.num_cached_free(), 1);
  EXPECT_EQ(pool.num_free(), 2);
  ASSERT_EQ(pool.Lookup(42), b);
  pool.AddRef(b);  // prefix-cache hit
  EXPECT_EQ(pool.num_cached_free(), 0);
  EXPECT_EQ(pool.ref_count(b), 1);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, DuplicateHashIsNotIndexedTwice) {
  BlockPool pool = MakePool(2);
  BlockId a = *pool.Allocate();
  BlockId b = *pool.Allocate();
  EXPECT_TRUE(pool.SetHash(a, 7));
  EXPECT_FALSE(pool.SetHash(b, 7));
  EXPECT_FALSE(pool.SetHash(a, 8));
  pool.Release(b);
  EXPECT_EQ(pool.num_plain_free(), 1);  // b had no hash: plain free
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, PlainFreeBlocksAreTakenBeforeEvictingCachedOnes) {
  BlockPool pool = MakePool(3);
  BlockId a = *pool.Allocate();
  BlockId b = *pool.Allocate();
  ASSERT_TRUE(pool.SetHash(a, 1));
  pool.Release(a);
  pool.Release(b);
  EXPECT_EQ(pool.Allocate(), b);          // plain free first (LIFO)
  EXPECT_EQ(pool.Allocate(), BlockId(2));
  EXPECT_EQ(pool.num_evictions(), 0);
  EXPECT_EQ(pool.Allocate(), a);          // then evicts the cached one
  EXPECT_EQ(pool.num_evictions(), 1);
  EXPECT_EQ(pool.Lookup(1), std::nullopt);
}

TEST(BlockPoolTest, EvictionOrderIsLeastRecentlyReleasedFirst) {
  BlockPool pool = MakePool(4);
  std::vector<BlockId> blocks;
  ASSERT_TRUE(pool.AllocateN(4, &blocks));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.SetHash(blocks[i], 100 + i));
  // Release order 2, 0, 3, 1 → LRU order 2, 0, 3, 1.
  for (int i : {2, 0, 3, 1}) pool.Release(blocks[i]);
  EXPECT_THAT(pool.CachedFreeInLruOrder(),
              ElementsAre(BlockId(2), BlockId(0), BlockId(3), BlockId(1)));
  // A hit on block 0 removes it; releasing it again makes it the most recent.
  pool.AddRef(blocks[0]);
  pool.Release(blocks[0]);
  EXPECT_THAT(pool.CachedFreeInLruOrder(),
              ElementsAre(BlockId(2), BlockId(3), BlockId(1), BlockId(0)));
  EXPECT_EQ(pool.Allocate(), BlockId(2));
  EXPECT_EQ(pool.Allocate(), BlockId(3));
  EXPECT_EQ(pool.Lookup(102), std::nullopt);
  EXPECT_EQ(pool.Lookup(103), std::nullopt);
  EXPECT_EQ(pool.Lookup(101), BlockId(1));
  EXPECT_EQ(pool.Lookup(100), BlockId(0));
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, CopyOnWrite) {
  BlockPool pool = MakePool(2);
  BlockId b = *pool.Allocate();
  EXPECT_EQ(pool.CopyOnWrite(b), b);  // sole owner writes in place
  pool.AddRef(b);
  auto copy = pool.CopyOnWrite(b);
  ASSERT_TRUE(copy.has_value());
  EXPECT_NE(*copy, b);
  EXPECT_EQ(pool.ref_count(b), 1);
  EXPECT_EQ(pool.ref_count(*copy), 1);
  pool.AddRef(b);
  EXPECT_EQ(pool.CopyOnWrite(b), std::nullopt);  // pool exhausted: a value
  EXPECT_EQ(pool.ref_count(b), 2);
}

// ---------------------------------------------------------------------------------
// Randomized test against a simple reference model (RELIABILITY.md: block_pool_model).
// The model is deliberately naive: plain vectors and a std::list for the LRU order.
class PoolModel {
 public:
  explicit PoolModel(int32_t n) : ref_(n, 0), hash_(n, std::nullopt) {
    for (int32_t i = n - 1; i >= 0; --i) free_.push_back(i);
  }
  std::optional<int32_t> Allocate() {
    int32_t i;
    if (!free_.empty()) {
      i = free_.back();
      free_.pop_back();
    } else if (!lru_.empty()) {
      i = lru_.front();
      lru_.pop_front();
      index_.erase(*hash_[i]);
      hash_[i].reset();
    } else {
      return std::nullopt;
    }
    ref_[i] = 1;
    return i;
  }
  void AddRef(int32_t i) {
    if (ref_[i] == 0) lru_.remove(i);
    ++ref_[i];
  }
  void Release(int32_t i) {
    if (--ref_[i] > 0) return;
    if (hash_[i]) {
      lru_.push_back(i);
    } else {
      free_.push_back(i);
    }
  }
  bool SetHash(int32_t i, uint64_t h) {
    if (hash_[i] || index_.contains(h)) return false;
    hash_[i] = h;
    index_[h] = i;
    return true;
  }
  std::optional<int32_t> Lookup(uint64_t h) const {
    auto it = index_.find(h);
    if (it == index_.end()) return std::nullopt;
    return it->second;
  }
  int32_t num_free() const { return static_cast<int32_t>(free_.size() + lru_.size()); }

  std::vector<int32_t> ref_;
  std::vector<std::optional<uint64_t>> hash_;
  std::vector<int32_t> free_;
  std::list<int32_t> lru_;
  absl::flat_hash_map<uint64_t, int32_t> index_;
};

void ExpectSame(const BlockPool& pool, const PoolModel& model, int op) {
  ASSERT_TRUE(pool.CheckInvariants().ok()) << "op " << op << ": " << pool.CheckInvariants();
  ASSERT_EQ(pool.num_free(), model.num_free()) << "op " << op;
  ASSERT_EQ(pool.num_cached_free(), static_cast<int32_t>(model.lru_.size())) << "op " << op;
  for (int32_t i = 0; i < pool.num_blocks(); ++i) {
    ASSERT_EQ(pool.ref_count(BlockId(i)), model.ref_[i]) << "op " << op << " block " << i;
    ASSERT_EQ(pool.has_hash(BlockId(i)), model.hash_[i].has_value()) << "op " << op;
  }
  std::vector<BlockId> lru = pool.CachedFreeInLruOrder();
  ASSERT_EQ(lru.size(), model.lru_.size());
  auto it = model.lru_.begin();
  for (BlockId b : lru) ASSERT_EQ(b.value(), *it++) << "op " << op;
}

TEST(BlockPoolModelTest, RandomOperationsMatchReferenceModel) {
  constexpr int kOps = 150000;
  constexpr int32_t kBlocks = 48;
  std::mt19937_64 rng(20240611);
  BlockPool pool = MakePool(kBlocks);
  PoolModel model(kBlocks);
  auto pick_referenced = [&]() -> std::optional<int32_t> {
    std::vector<int32_t> c;
    for (int32_t i = 0; i < kBlocks; ++i) {
      if (model.ref_[i] > 0) c.push_back(i);
    }
    if (c.empty()) return std::nullopt;
    return c[rng() % c.size()];
  };
  for (int op = 0; op < kOps; ++op) {
    const int kind = static_cast<int>(rng() % 100);
    if (kind < 25) {  // allocate
      auto got = pool.Allocate();
      auto want = model.Allocate();
      ASSERT_EQ(got.has_value(), want.has_value()) << "op " << op;
      if (got) {
        ASSERT_EQ(got->value(), *want) << "op " << op;
      }
    } else if (kind < 30) {  // allocate n, all or nothing
      const int32_t n = static_cast<int32_t>(rng() % 6);
      std::vector<BlockId> out;
      const bool ok = pool.AllocateN(n, &out);
      ASSERT_EQ(ok, n <= model.num_free()) << "op " << op;
      for (int32_t k = 0; ok && k < n; ++k) ASSERT_EQ(out[k].value(), *model.Allocate());
    } else if (kind < 60) {  // release
      if (auto i = pick_referenced()) {
        pool.Release(BlockId(*i));
        model.Release(*i);
      }
    } else if (kind < 70) {  // share (fork) a referenced block
      if (auto i = pick_referenced()) {
        pool.AddRef(BlockId(*i));
        model.AddRef(*i);
      }
    } else if (kind < 82) {  // register a hash (small space: collisions happen)
      if (auto i = pick_referenced()) {
        const uint64_t h = rng() % 64;
        ASSERT_EQ(pool.SetHash(BlockId(*i), h), model.SetHash(*i, h)) << "op " << op;
      }
    } else if (kind < 94) {  // prefix-cache lookup, and take the hit
      const uint64_t h = rng() % 64;
      auto got = pool.Lookup(h);
      auto want = model.Lookup(h);
      ASSERT_EQ(got.has_value(), want.has_value()) << "op " << op;
      if (got) {
        ASSERT_EQ(got->value(), *want);
        if (rng() % 2) {
          pool.AddRef(*got);
          model.AddRef(*want);
        }
      }
    } else {  // copy-on-write
      if (auto i = pick_referenced()) {
        auto got = pool.CopyOnWrite(BlockId(*i));
        if (model.ref_[*i] == 1) {
          ASSERT_EQ(got, BlockId(*i));
        } else {
          auto want = model.Allocate();
          ASSERT_EQ(got.has_value(), want.has_value()) << "op " << op;
          if (got) {
            ASSERT_EQ(got->value(), *want);
            --model.ref_[*i];
          }
        }
      }
    }
    ExpectSame(pool, model, op);
    if (HasFatalFailure()) return;
  }
  // Drain: everything released → zero referenced (cached-free may stay).
  for (int32_t i = 0; i < kBlocks; ++i) {
    while (model.ref_[i] > 0) {
      pool.Release(BlockId(i));
      model.Release(i);
    }
  }
  EXPECT_EQ(pool.num_referenced(), 0);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

}  // namespace
}  // namespace weft

#include "scheduler/kv_cache_manager.h"

#include <map>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "glog/logging.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

using ::testing::ElementsAre;

KvCacheManager Make(int32_t num_blocks, int32_t block_size, bool prefix_caching = true) {
  KvCacheManagerOptions o;
  o.num_blocks = num_blocks;
  o.block_size = block_size;
  o.enable_prefix_caching = prefix_caching;
  auto m = KvCacheManager::Create(o);
  CHECK(m.ok()) << m.status();
  return std::move(*m);
}

std::vector<int32_t> Range(int32_t from, int32_t n) {
  std::vector<int32_t> v(n);
  for (int32_t i = 0; i < n; ++i) v[i] = from + i;
  return v;
}

std::vector<BlockHash> Hashes(const std::vector<int32_t>& tokens, int32_t bs) {
  std::vector<BlockHash> h;
  UpdateBlockHashes(tokens, bs, &h);
  return h;
}

TEST(BlockHashTest, ChainedAndIncremental) {
  std::vector<int32_t> t = Range(0, 10);
  std::vector<BlockHash> h;
  UpdateBlockHashes(absl::MakeConstSpan(t).subspan(0, 5), 4, &h);
  EXPECT_EQ(h.size(), 1u);
  UpdateBlockHashes(t, 4, &h);
  EXPECT_EQ(h, Hashes(t, 4));
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[1], HashBlock(h[0], absl::MakeConstSpan(t).subspan(4, 4)));
  // Same block content under a different parent hashes differently.
  std::vector<int32_t> u = t;
  u[0] = 99;
  EXPECT_NE(Hashes(u, 4)[1], h[1]);
}

TEST(KvCacheManagerTest, OptionsValidate) {
  KvCacheManagerOptions o;
  o.num_blocks = 4;
  o.block_size = 0;
  EXPECT_FALSE(KvCacheManager::Create(o).ok());
}

TEST(KvCacheManagerTest, GrowAllocatesPerBlockAndFailsAsValue) {
  KvCacheManager kv = Make(3, 4);
  BlockTable t;
  EXPECT_TRUE(kv.Grow(1, &t));
  EXPECT_EQ(t.block_ids.size(), 1u);
  EXPECT_TRUE(kv.Grow(4, &t));
  EXPECT_EQ(t.block_ids.size(), 1u);
  EXPECT_TRUE(kv.Grow(9, &t));
  EXPECT_EQ(t.block_ids.size(), 3u);
  EXPECT_FALSE(kv.Grow(13, &t));
  EXPECT_EQ(t.block_ids.size(), 3u);
  kv.Free(&t);
  EXPECT_EQ(kv.num_free_blocks(), 3);
}

TEST(KvCacheManagerTest, PrefixHitLeavesOneTokenToCompute) {
  KvCacheManager kv = Make(8, 4);
  std::vector<int32_t> prompt = Range(0, 8);  // exactly two blocks
  std::vector<BlockHash> h = Hashes(prompt, 4);
  BlockTable a;
  ASSERT_TRUE(kv.Admit(h, PrefixHit{}, 8, &a));
  kv.Commit(h, 2, &a);
  // Same 8 tokens: only the first block may be reused (token 7 must be computed).
  PrefixHit hit = kv.FindCachedPrefix(h, 8);
  EXPECT_EQ(hit.num_blocks, 1);
  EXPECT_EQ(hit.num_cached_free, 0);
  // With 9 tokens both blocks are reusable.
  EXPECT_EQ(kv.FindCachedPrefix(h, 9).num_blocks, 2);
  kv.Free(&a);
  hit = kv.FindCachedPrefix(h, 9);
  EXPECT_EQ(hit.num_blocks, 2);
  EXPECT_EQ(hit.num_cached_free, 2);
  EXPECT_EQ(kv.BlocksNeededToAdmit(hit, 9), 3);  // 2 cached-free + 1 fresh
  BlockTable b;
  ASSERT_TRUE(kv.Admit(h, hit, 9, &b));
  EXPECT_THAT(b.block_ids, ElementsAre(BlockId(0), BlockId(1), BlockId(2)));
  EXPECT_EQ(b.num_hashed_blocks, 2);
}

TEST(KvCacheManagerTest, PrefixCachingOffNeverHits) {
  KvCacheManager kv = Make(8, 4, /*prefix_caching=*/false);
  std::vector<BlockHash> h = Hashes(Range(0, 12), 4);
  BlockTable a;
  ASSERT_TRUE(kv.Admit(h, PrefixHit{}, 12, &a));
  kv.Commit(h, 3, &a);
  EXPECT_EQ(kv.FindCachedPrefix(h, 12).num_blocks, 0);
  kv.Free(&a);
  EXPECT_EQ(kv.pool().num_cached_free(), 0);
}

TEST(KvCacheManagerTest, SharedHundredTokenPrefixIsStoredOnce) {
  // Block size 16: a 100-token shared prefix holds 6 full blocks (96 tokens).
  KvCacheManager kv = Make(64, 16);
  std::vector<int32_t> a_tokens = Range(1000, 100);
  std::vector<int32_t> b_tokens = a_tokens;
  for (int32_t t : Range(5000, 30)) a_tokens.push_back(t);
  for (int32_t t : Range(7000, 30)) b_tokens.push_back(t);
  std::vector<BlockHash> ha = Hashes(a_tokens, 16), hb = Hashes(b_tokens, 16);
  BlockTable a, b;
  ASSERT_TRUE(kv.Admit(ha, kv.FindCachedPrefix(ha, 130), 130, &a));
  kv.Commit(ha, 130 / 16, &a);
  PrefixHit hit = kv.FindCachedPrefix(hb, 130);
  EXPECT_EQ(hit.num_blocks, 6);
  ASSERT_TRUE(kv.Admit(hb, hit, 130, &b));
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(a.block_ids[i], b.block_ids[i]);
    EXPECT_EQ(kv.pool().ref_count(a.block_ids[i]), 2);
  }
  EXPECT_NE(a.block_ids[6], b.block_ids[6]);
  EXPECT_EQ(kv.pool().num_referenced(), 9 + 3);  // 9 for a, 3 more for b
}

TEST(KvCacheManagerTest, ForkSharesFullBlocksAndCopiesPartialOne) {
  KvCacheManager kv = Make(8, 4);
  BlockTable parent;
  ASSERT_TRUE(kv.Grow(10, &parent));  // blocks 0,1,2 (2 is partial: tokens 8,9)
  BlockTable child;
  std::optional<KvBlockCopy> copy;
  ASSERT_TRUE(kv.Fork(parent, 10, &child, &copy));
  EXPECT_THAT(child.block_ids, ElementsAre(BlockId(0), BlockId(1), BlockId(3)));
  ASSERT_TRUE(copy.has_value());
  EXPECT_EQ(copy->src, BlockId(2));
  EXPECT_EQ(copy->dst, BlockId(3));
  EXPECT_EQ(kv.pool().ref_count(BlockId(0)), 2);
  EXPECT_EQ(kv.pool().ref_count(BlockId(2)), 1);
  // Block-aligned fork: nothing to copy.
  BlockTable child2;
  ASSERT_TRUE(kv.Fork(parent, 8, &child2, &copy));
  EXPECT_FALSE(copy.has_value());
  EXPECT_EQ(child2.block_ids.size(), 2u);
  kv.Free(&parent);
  kv.Free(&child);
  kv.Free(&child2);
  EXPECT_EQ(kv.pool().num_referenced(), 0);
}

TEST(KvCacheManagerTest, ForkWithoutBlockForCopyFailsCleanly) {
  KvCacheManager kv = Make(2, 4);
  BlockTable parent;
  ASSERT_TRUE(kv.Grow(6, &parent));
  BlockTable child;
  std::optional<KvBlockCopy> copy;
  EXPECT_FALSE(kv.Fork(parent, 6, &child, &copy));
  EXPECT_TRUE(child.block_ids.empty());
  EXPECT_EQ(kv.pool().ref_count(BlockId(0)), 1);
}

TEST(KvCacheManagerTest, FreedSequenceTailIsEvictedBeforeItsPrefix) {
  KvCacheManager kv = Make(3, 2);
  std::vector<int32_t> t = Range(0, 7);
  std::vector<BlockHash> h = Hashes(t, 2);
  BlockTable a;
  ASSERT_TRUE(kv.Admit(h, PrefixHit{}, 6, &a));
  kv.Commit(h, 3, &a);
  kv.Free(&a);
  EXPECT_THAT(kv.pool().CachedFreeInLruOrder(), ElementsAre(BlockId(2), BlockId(1), BlockId(0)));
}

// ---------------------------------------------------------------------------------
// Randomized sequences (allocate / append / fork / free / abort / preempt) against a
// reference model of who owns which block and what each KV slot holds.
struct ModelSeq {
  std::vector<int32_t> tokens;  // known tokens, all of them computed (KV written)
  std::vector<BlockHash> hashes;
  BlockTable table;
};

class KvModelTest : public ::testing::Test {
 protected:
  static constexpr int32_t kBlocks = 40;
  static constexpr int32_t kBs = 4;

  // What each slot holds: the token written there (-1 = never written).
  std::vector<int32_t> slots_ = std::vector<int32_t>(kBlocks * kBs, -1);
  KvCacheManager kv_ = Make(kBlocks, kBs);
  std::map<int, ModelSeq> seqs_;

  void Write(ModelSeq& s, int32_t from) {
    for (int32_t p = from; p < static_cast<int32_t>(s.tokens.size()); ++p) {
      const BlockId b = s.table.block_ids[p / kBs];
      ASSERT_EQ(kv_.pool().ref_count(b), 1) << "write into shared block " << b;
      slots_[b.value() * kBs + p % kBs] = s.tokens[p];
    }
  }

  void Check(int op) {
    ASSERT_TRUE(kv_.pool().CheckInvariants().ok()) << op << kv_.pool().CheckInvariants();
    std::vector<int32_t> owners(kBlocks, 0);
    for (auto& [id, s] : seqs_) {
      ASSERT_EQ(static_cast<int32_t>(s.table.block_ids.size()), kv_.BlocksFor(s.tokens.size()));
      for (BlockId b : s.table.block_ids) ++owners[b.value()];
      for (int32_t p = 0; p < static_cast<int32_t>(s.tokens.size()); ++p) {
        ASSERT_EQ(slots_[s.table.block_ids[p / kBs].value() * kBs + p % kBs], s.tokens[p])
            << "op " << op << " seq " << id << " pos " << p;
      }
    }
    for (int32_t b = 0; b < kBlocks; ++b) {
      ASSERT_EQ(kv_.pool().ref_count(BlockId(b)), owners[b]) << "op " << op << " block " << b;
    }
    if (seqs_.empty()) {
      ASSERT_EQ(kv_.pool().num_referenced(), 0);
    }
  }
};

TEST_F(KvModelTest, RandomSequenceOperationsKeepOwnershipAndContents) {
  constexpr int kOps = 120000;
  std::mt19937 rng(777);
  int next_id = 0;
  int64_t hits = 0;
  auto random_seq = [&]() -> ModelSeq* {
    if (seqs_.empty()) return nullptr;
    auto it = seqs_.begin();
    std::advance(it, rng() % seqs_.size());
    return &it->second;
  };
  for (int op = 0; op < kOps; ++op) {
    const int kind = static_cast<int>(rng() % 100);
    if (kind < 20) {  // admit a new sequence: one of 3 shared prefixes + random tail
      ModelSeq s;
      const int32_t prefix = static_cast<int32_t>(rng() % 3);
      const int32_t len = 1 + static_cast<int32_t>(rng() % 14);
      for (int32_t i = 0; i < len; ++i) {
        s.tokens.push_back(i < 9 ? prefix * 100 + i : static_cast<int32_t>(rng() % 5));
      }
      UpdateBlockHashes(s.tokens, kBs, &s.hashes);
      PrefixHit hit = kv_.FindCachedPrefix(s.hashes, len);
      if (kv_.Admit(s.hashes, hit, len, &s.table)) {
        hits += hit.num_blocks;
        Write(s, hit.num_blocks * kBs);
        kv_.Commit(s.hashes, len / kBs, &s.table);
        seqs_[next_id++] = std::move(s);
      }
    } else if (kind < 60) {  // append 1..3 tokens (decode / chunk)
      if (ModelSeq* s = random_seq()) {
        const int32_t n = 1 + static_cast<int32_t>(rng() % 3);
        const int32_t old = static_cast<int32_t>(s->tokens.size());
        if (kv_.Grow(old + n, &s->table)) {
          for (int32_t i = 0; i < n; ++i) s->tokens.push_back(static_cast<int32_t>(rng() % 5));
          Write(*s, old);
          UpdateBlockHashes(s->tokens, kBs, &s->hashes);
          kv_.Commit(s->hashes, s->tokens.size() / kBs, &s->table);
        }
      }
    } else if (kind < 72) {  // fork (n > 1)
      if (ModelSeq* s = random_seq()) {
        ModelSeq c;
        c.tokens = s->tokens;
        c.hashes = s->hashes;
        std::optional<KvBlockCopy> copy;
        if (kv_.Fork(s->table, s->tokens.size(), &c.table, &copy)) {
          if (copy) {  // the worker executes the copy
            for (int32_t k = 0; k < kBs; ++k) {
              slots_[copy->dst.value() * kBs + k] = slots_[copy->src.value() * kBs + k];
            }
          }
          seqs_[next_id++] = std::move(c);
        }
      }
    } else {  // free: finish, abort or preempt all release the same way
      if (ModelSeq* s = random_seq()) {
        kv_.Free(&s->table);
        for (auto it = seqs_.begin(); it != seqs_.end(); ++it) {
          if (&it->second == s) {
            seqs_.erase(it);
            break;
          }
        }
      }
    }
    Check(op);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(hits, 1000);  // the shared prefixes were actually reused
  for (auto& [id, s] : seqs_) kv_.Free(&s.table);
  seqs_.clear();
  Check(kOps);
}

}  // namespace
}  // namespace weft

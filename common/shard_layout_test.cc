#include "common/shard_layout.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

TEST(ShardLayoutTest, DefaultModelTp2IsUnevenByKvGroups) {
  auto r0 = ComputeShardLayout(9, 3, 1536, 49152, 2, 0);
  auto r1 = ComputeShardLayout(9, 3, 1536, 49152, 2, 1);
  ASSERT_TRUE(r0.ok() && r1.ok());
  EXPECT_EQ(r0->num_kv_heads(), 2);
  EXPECT_EQ(r1->num_kv_heads(), 1);
  EXPECT_EQ(r0->num_heads(), 6);
  EXPECT_EQ(r1->num_heads(), 3);
  EXPECT_EQ(r0->ff_end, r1->ff_begin);
  EXPECT_EQ(r1->ff_end, 1536);
  EXPECT_EQ(r0->vocab_end, 24576);
  EXPECT_EQ(r0->ToString(), "tp=2;rank=0;kv=0-2;heads=0-6;ff=0-768;vocab=0-24576");
}

TEST(ShardLayoutTest, RanksTileEveryDimension) {
  for (int ws = 1; ws <= 3; ++ws) {
    int32_t kv = 0, heads = 0;
    int64_t ff = 0, vocab = 0;
    for (int r = 0; r < ws; ++r) {
      auto s = ComputeShardLayout(9, 3, 1536, 49152, ws, r);
      ASSERT_TRUE(s.ok());
      EXPECT_EQ(s->kv_begin, kv);
      EXPECT_EQ(s->head_begin, heads);
      EXPECT_EQ(s->ff_begin, ff);
      EXPECT_EQ(s->vocab_begin, vocab);
      EXPECT_EQ(s->ff_begin % 32, 0);
      kv = s->kv_end;
      heads = s->head_end;
      ff = s->ff_end;
      vocab = s->vocab_end;
    }
    EXPECT_EQ(kv, 3);
    EXPECT_EQ(heads, 9);
    EXPECT_EQ(ff, 1536);
    EXPECT_EQ(vocab, 49152);
  }
}

TEST(ShardLayoutTest, Refusals) {
  EXPECT_FALSE(ComputeShardLayout(9, 3, 1536, 49152, 4, 0).ok());  // more ranks than KV heads
  EXPECT_FALSE(ComputeShardLayout(9, 3, 1536, 49152, 2, 2).ok());  // rank out of range
  EXPECT_FALSE(ComputeShardLayout(9, 4, 1536, 49152, 2, 0).ok());  // heads don't group
}

}  // namespace
}  // namespace weft

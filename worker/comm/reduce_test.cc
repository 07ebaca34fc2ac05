#include "worker/comm/reduce.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(ReduceChunkOfTest, ChunksAreDisjointCoveringAlignedAndInRankOrder) {
  for (int w = 1; w <= 8; ++w) {
    for (size_t count : {0, 1, 7, 15, 16, 17, 576, 1000, 24576, 16384, 12288, 100003}) {
      size_t next = 0;
      for (int r = 0; r < w; ++r) {
        const ChunkRange c = ReduceChunkOf(count, w, r);
        ASSERT_EQ(c.begin, next) << "count " << count << " w " << w << " r " << r;
        ASSERT_LE(c.begin, c.end);
        if (c.end < count) {
          ASSERT_EQ(c.end % kReduceChunkAlign, 0u);
        }
        next = c.end;
      }
      ASSERT_EQ(next, count) << "count " << count << " w " << w;
    }
  }
}

TEST(ReduceChunkOfTest, ChunksAreBalanced) {
  // 49152 / 4 floats per rank: the reduction work per rank shrinks with world size.
  EXPECT_EQ(ReduceChunkOf(49152, 4, 3).end - ReduceChunkOf(49152, 4, 3).begin, 12288u);
  EXPECT_EQ(ReduceChunkOf(576, 2, 1).end - ReduceChunkOf(576, 2, 1).begin, 288u);
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

TEST(SumInRankOrderTest, MatchesLeftToRightScalarSumBitwiseEvenWhenAliased) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
  for (int w : {1, 2, 3, 4, 7}) {
    for (size_t n : {0, 1, 255, 256, 257, 1000, 4099}) {
      std::vector<std::vector<float>> bufs(w, std::vector<float>(n));
      for (auto& b : bufs) {
        for (float& x : b) x = dist(rng);
      }
      std::vector<float> expected(n);
      for (size_t i = 0; i < n; ++i) {
        float acc = bufs[0][i];
        for (int r = 1; r < w; ++r) acc += bufs[r][i];
        expected[i] = acc;
      }
      std::vector<const float*> srcs;
      for (auto& b : bufs) srcs.push_back(b.data());
      float* dst = bufs[w - 1].data();  // aliases the last source
      SumInRankOrder(srcs.data(), w, n, dst);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(Bits(dst[i]), Bits(expected[i])) << "w " << w << " n " << n << " i " << i;
      }
    }
  }
}

}  // namespace
}  // namespace weft

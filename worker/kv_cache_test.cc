#include "worker/kv_cache.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace {

KvCacheOptions SmallOptions() {
  KvCacheOptions o;
  o.num_layers = 3;
  o.num_kv_heads = 2;
  o.head_dim = 8;
  o.block_size = 4;
  o.num_blocks = 5;
  return o;
}

TEST(KvCacheTest, ValidatesOptions) {
  EXPECT_TRUE(SmallOptions().Validate().ok());
  KvCacheOptions o = SmallOptions();
  o.num_blocks = 0;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  o = SmallOptions();
  o.block_size = 0;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  o = SmallOptions();
  o.head_dim = -1;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  o = SmallOptions();
  o.dtype = KvDtype::kInt8;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kUnimplemented);
  EXPECT_FALSE(KvCache::Create(o).ok());
}

TEST(KvCacheTest, BlocksFromByteBudget) {
  const KvCacheOptions o = SmallOptions();
  EXPECT_EQ(o.BytesPerBlock(), 3 * 2 * 2 * 8 * 4 * 4);
  auto cache = KvCache::CreateWithBudget(o, o.BytesPerBlock() * 7 + 100);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ((*cache)->num_blocks(), 7);
  EXPECT_EQ((*cache)->pool_bytes(), o.BytesPerBlock() * 7);
  EXPECT_FALSE(KvCache::CreateWithBudget(o, o.BytesPerBlock() - 1).ok());
}

// Layer views and WritePagedKv put K[b, l, h, s][d] and V[b, l, h, s][d] where the header
// says; the pool starts zeroed.
TEST(KvCacheTest, LayoutIsTheDocumentedOne) {
  const KvCacheOptions o = SmallOptions();
  auto cache_or = KvCache::Create(o);
  ASSERT_TRUE(cache_or.ok());
  KvCache& cache = **cache_or;
  const int64_t L = o.num_layers, H = o.num_kv_heads, D = o.head_dim, B = o.block_size;
  for (int32_t b = 0; b < o.num_blocks; ++b) {
    for (int64_t i = 0; i < cache.floats_per_block(); ++i) {
      ASSERT_EQ(cache.BlockData(BlockId(b))[i], 0.0f);
    }
  }
  const int64_t block = 3, slot = 2;
  for (int32_t l = 0; l < o.num_layers; ++l) {
    std::vector<float> k(H * D), v(H * D);
    for (int64_t i = 0; i < H * D; ++i) {
      k[i] = 1000 * l + i;
      v[i] = -1000 * l - i - 1;
    }
    const int64_t slot_id = block * B + slot;
    kernels::WritePagedKv(cache.Layer(l), k.data(), v.data(), H * D, &slot_id, 0, 1);
  }
  const float* base = cache.BlockData(BlockId(block));
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t d = 0; d < D; ++d) {
        const int64_t layer = l * 2 * H * D * B;
        EXPECT_EQ(base[layer + h * D * B + d * B + slot], 1000 * l + h * D + d);
        EXPECT_EQ(base[layer + H * D * B + h * D * B + slot * D + d], -1000 * l - h * D - d - 1);
      }
    }
  }
}

TEST(KvCacheTest, CopyBlockCopiesEveryLayer) {
  auto cache_or = KvCache::Create(SmallOptions());
  ASSERT_TRUE(cache_or.ok());
  KvCache& cache = **cache_or;
  float* src = cache.BlockData(BlockId(1));
  for (int64_t i = 0; i < cache.floats_per_block(); ++i) src[i] = std::sin(i);
  ASSERT_TRUE(cache.CopyBlock(BlockId(1), BlockId(4)).ok());
  for (int64_t i = 0; i < cache.floats_per_block(); ++i) {
    ASSERT_EQ(cache.BlockData(BlockId(4))[i], src[i]);
    ASSERT_EQ(cache.BlockData(BlockId(3))[i], 0.0f);
  }
  EXPECT_EQ(cache.CopyBlock(BlockId(1), BlockId(5)).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(cache.CopyBlock(BlockId(-1), BlockId(0)).code(), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace weft

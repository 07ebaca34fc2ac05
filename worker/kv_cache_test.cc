#include "worker/kv_cache.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "common/ggml_types.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

using ::weft::testing::StatusIs;

KvPoolOptions SmallOptions() {
  KvPoolOptions o;
  o.num_layers = 3;
  o.num_kv_heads = 2;
  o.head_dim = 8;
  o.block_size = 4;
  o.num_blocks = 5;
  o.dtype = KvDtype::kF32;  // the fp32 views (BlockData) below
  return o;
}

absl::Status Validate(const KvPoolOptions& o) { return o.Validate(KvCache::BytesPerBlock(o)); }

TEST(KvCacheTest, ValidatesOptions) {
  EXPECT_TRUE(Validate(SmallOptions()).ok());
  KvPoolOptions o = SmallOptions();
  o.num_blocks = 0;
  EXPECT_THAT(Validate(o), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(KvCache::Create(o).ok());
  o = SmallOptions();
  o.block_size = 0;
  EXPECT_THAT(Validate(o), StatusIs(absl::StatusCode::kInvalidArgument));
  o = SmallOptions();
  o.head_dim = -1;
  EXPECT_THAT(Validate(o), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(KvCache::Create(o).ok());
  o = SmallOptions();
  o.dtype = KvDtype::kInt8;
  o.head_dim = 10;  // int8 tiles take 4 values of head_dim together
  EXPECT_THAT(KvCache::Create(o).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(KvCacheTest, DtypesSizeTheirBlocks) {
  KvPoolOptions o = SmallOptions();  // 3 layers, 2 heads, head_dim 8, blocks of 4
  const int64_t values = int64_t{o.num_layers} * 2 * o.num_kv_heads * o.head_dim * o.block_size;
  const struct {
    const char* name;
    KvDtype dtype;
    int64_t bytes;
  } cases[] = {{"f32", KvDtype::kF32, 4 * values},
               {"f16", KvDtype::kF16, 2 * values},
               {"bf16", KvDtype::kBf16, 2 * values},
               // one fp16 scale per token and head
               {"int8", KvDtype::kInt8, values + 2 * values / o.head_dim}};
  for (const auto& c : cases) {
    o.dtype = c.dtype;
    EXPECT_EQ(KvCache::BytesPerBlock(o), c.bytes) << c.name;
    auto cache = KvCache::Create(o);
    ASSERT_TRUE(cache.ok()) << cache.status();
    EXPECT_EQ((*cache)->bytes_per_block(), c.bytes);
  }
}

// int8: q and the fp16 scale of each token and head land where kv_layout.h says.
// head_dim 8 takes the portable write, 64 the AVX-512 one (where the CPU has it).
TEST(KvCacheTest, Int8LayoutIsTheDocumentedOne) {
  for (int32_t head_dim : {8, 64}) {
  SCOPED_TRACE(head_dim);
  KvPoolOptions o = SmallOptions();
  o.dtype = KvDtype::kInt8;
  o.head_dim = head_dim;
  auto cache_or = KvCache::Create(o);
  ASSERT_TRUE(cache_or.ok());
  KvCache& cache = **cache_or;
  const int64_t H = o.num_kv_heads, D = o.head_dim, B = o.block_size;
  std::vector<float> k(H * D), v(H * D);
  for (int64_t i = 0; i < H * D; ++i) {
    k[i] = 0.5f * (i + 1);   // head max: 4 (head 0) and 8 (head 1)
    v[i] = -0.25f * (i + 1);
  }
  const int64_t block = 2, slot = 3, slot_id = block * B + slot;
  const kernels::PagedKvLayer layer = cache.Layer(1);
  kernels::WritePagedKv(layer, k.data(), v.data(), H * D, &slot_id, 0, 1);
  for (int32_t h = 0; h < H; ++h) {
    const uint8_t* kt = layer.KTile(block, h);
    const uint8_t* vt = layer.VTile(block, h);
    uint16_t ks, vs;  // after D * B bytes (B is a multiple of 4 here)
    std::memcpy(&ks, kt + D * B + 2 * slot, 2);
    std::memcpy(&vs, vt + D * B + 2 * slot, 2);
    const float kmax = 0.5f * (h * D + D), vmax = 0.25f * (h * D + D);
    EXPECT_EQ(Fp16ToFp32(ks), Fp16ToFp32(Fp32ToFp16(kmax / 127)));
    EXPECT_EQ(Fp16ToFp32(vs), Fp16ToFp32(Fp32ToFp16(vmax / 127)));
    for (int32_t d = 0; d < D; ++d) {
      // K biased by 128, 4 dims of a slot together; V 4 slots of a dim together.
      const int kq = kt[((d / 4) * B + slot) * 4 + d % 4] - 128;
      const int8_t vq = static_cast<int8_t>(vt[((slot / 4) * D + d) * 4 + slot % 4]);
      EXPECT_EQ(kq, static_cast<int>(std::nearbyint(k[h * D + d] / Fp16ToFp32(ks))));
      EXPECT_EQ(vq, static_cast<int>(std::nearbyint(v[h * D + d] / Fp16ToFp32(vs))));
    }
    // The other slots' bytes stay as they were (zero).
    int touched_k = 0, touched_v = 0;
    for (int64_t i = 0; i < D * B; ++i) {
      touched_k += kt[i] != 0;
      touched_v += vt[i] != 0;
    }
    EXPECT_LE(touched_k, D);
    EXPECT_LE(touched_v, D);
  }
  }
}

TEST(KvCacheTest, BlocksFromByteBudget) {
  KvPoolOptions o = SmallOptions();
  const int64_t per_block = KvCache::BytesPerBlock(o);
  EXPECT_EQ(per_block, 3 * 2 * 2 * 8 * 4 * 4);
  absl::StatusOr<int32_t> blocks = KvPoolBlocks(0, per_block * 7 + 100, per_block);
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  EXPECT_EQ(*blocks, 7);
  o.num_blocks = *blocks;
  auto cache = KvCache::Create(o);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ((*cache)->pool_bytes(), per_block * 7);
  EXPECT_FALSE(KvPoolBlocks(0, per_block - 1, per_block).ok());
  EXPECT_FALSE(KvPoolBlocks(0, int64_t{1} << 62, 1).ok());  // over 2^31 blocks
  EXPECT_EQ(*KvPoolBlocks(3, 0, per_block), 3);            // a count given wins
}

// Layer views and WritePagedKv put K[b, l, h, s][d] and V[b, l, h, s][d] where the header
// says; the pool starts zeroed.
TEST(KvCacheTest, LayoutIsTheDocumentedOne) {
  const KvPoolOptions o = SmallOptions();
  auto cache_or = KvCache::Create(o);
  ASSERT_TRUE(cache_or.ok());
  KvCache& cache = **cache_or;
  const int64_t L = o.num_layers, H = o.num_kv_heads, D = o.head_dim, B = o.block_size;
  for (int32_t b = 0; b < o.num_blocks; ++b) {
    for (int64_t i = 0; i < cache.floats_per_block(); ++i) {
      ASSERT_EQ(cache.BlockData(BlockId(b))[i], 0.0f);
    }
  }
  EXPECT_EQ(cache.Layer(0).head_stride, D * B * 4);
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
  EXPECT_THAT(cache.CopyBlock(BlockId(1), BlockId(5)), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(cache.CopyBlock(BlockId(-1), BlockId(0)), StatusIs(absl::StatusCode::kOutOfRange));
}

// One parser for every backend's --kv_dtype (the CUDA factory takes its result).
TEST(KvCacheTest, ParseKvDtypeTakesTheCudaSpellingOfF16) {
  auto d = ParseKvDtype("fp16");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, KvDtype::kF16);
}

}  // namespace
}  // namespace weft

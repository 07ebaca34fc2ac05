// The fused RoPE + paged KV write (rope_kv.h) against the two kernels it replaces,
// ApplyRope then WritePagedKv (themselves tested against their CPU twins): the rotated q
// rows and every byte of the KV pool (data and int8 scales) must be the same bits, for
// both pairings, partial rotary dims, fp16/bf16/int8 KV, head sizes 64 and 128, an odd
// block size and padding tokens (slot -1: q rotated, nothing stored).
#include "kernels/cuda/rope_kv.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/paged_kv.h"
#include "kernels/cuda/testing/cuda_test_util.h"

namespace weft::kernels::cuda {
namespace {

using testing::DeviceArray;

struct Case {
  RopeStyle style;
  int32_t head_dim;
  int32_t rot_dim;
  KvDtype dtype;
  int32_t block_size;
};

class RopeKvTest : public ::testing::TestWithParam<Case> {};

TEST_P(RopeKvTest, SameBitsAsRopeThenWrite) {
  WEFT_SKIP_WITHOUT_CUDA();
  const Case c = GetParam();
  const int32_t q_heads = 6, kv_heads = 2, tokens = 37, num_blocks = 16;
  const int64_t width = int64_t{q_heads + 2 * kv_heads} * c.head_dim;
  std::mt19937 rng(3);
  std::normal_distribution<float> val(0.0f, 2.0f);
  std::vector<float> qkv(tokens * width);
  for (float& x : qkv) x = val(rng);
  std::vector<int32_t> pos(tokens);
  std::vector<int64_t> slots(tokens);
  std::vector<int64_t> free_slots(int64_t{num_blocks} * c.block_size);
  for (size_t i = 0; i < free_slots.size(); ++i) free_slots[i] = static_cast<int64_t>(i);
  std::shuffle(free_slots.begin(), free_slots.end(), rng);
  for (int32_t t = 0; t < tokens; ++t) {
    pos[t] = static_cast<int32_t>(rng() % 40000);
    slots[t] = t % 9 == 4 ? -1 : free_slots[t];  // some padding tokens
  }
  std::vector<double> inv(c.rot_dim / 2);
  RopeInvFreq(10000.0f, c.rot_dim, inv.data());

  // One layer's pool: K then V data per block, then the int8 scales.
  const int64_t half = int64_t{kv_heads} * c.block_size * c.head_dim;
  const int32_t es = KvElementBytes(c.dtype);
  const bool int8 = c.dtype == KvDtype::kInt8;
  const int64_t block_bytes = 2 * half * es + (int8 ? 2 * (half / 8) * 2 : 0);
  auto make_view = [&](uint8_t* pool) {
    PagedKvView v;
    v.k = pool;
    v.v = pool + half * es;
    if (int8) {
      v.k_scale = reinterpret_cast<uint16_t*>(pool + 2 * half * es);
      v.v_scale = v.k_scale + half / 8;
    }
    v.block_stride = block_bytes / es;
    v.scale_block_stride = block_bytes / 2;
    v.block_size = c.block_size;
    v.num_kv_heads = kv_heads;
    v.head_dim = c.head_dim;
    v.dtype = c.dtype;
    return v;
  };
  DeviceArray<int32_t> dpos(pos);
  DeviceArray<int64_t> dslots(slots);
  DeviceArray<double> dinv(inv);

  // Reference: ApplyRope on q and k, then WritePagedKv.
  DeviceArray<float> ref_qkv(qkv);
  DeviceArray<uint8_t> ref_pool(block_bytes * num_blocks);
  ref_pool.FillBytes(0x5a);
  const PagedKvView ref_view = make_view(ref_pool.get());
  float* rq = ref_qkv.get();
  WEFT_EXPECT_CUDA_OK(ApplyRope(c.style, dpos.get(), dinv.get(), c.rot_dim, c.head_dim, tokens,
                                {rq, width, q_heads},
                                {rq + q_heads * c.head_dim, width, kv_heads}, nullptr));
  WEFT_EXPECT_CUDA_OK(WritePagedKv(ref_view, rq + q_heads * c.head_dim,
                                   rq + (q_heads + kv_heads) * c.head_dim, width, dslots.get(),
                                   tokens, nullptr));

  // Fused.
  DeviceArray<float> got_qkv(qkv);
  DeviceArray<uint8_t> got_pool(block_bytes * num_blocks);
  got_pool.FillBytes(0x5a);
  RopeKvArgs a;
  a.qkv = got_qkv.get();
  a.stride = width;
  a.num_heads = q_heads;
  a.num_tokens = tokens;
  a.positions = dpos.get();
  a.slot_mapping = dslots.get();
  a.inv_freq = dinv.get();
  a.rot_dim = c.rot_dim;
  a.style = c.style;
  WEFT_EXPECT_CUDA_OK(RopeAndWritePagedKv(a, make_view(got_pool.get()), nullptr));

  EXPECT_EQ(got_pool.ToHost(), ref_pool.ToHost()) << "KV pool bytes differ";
  const std::vector<float> got = got_qkv.ToHost(), want = ref_qkv.ToHost();
  for (int32_t t = 0; t < tokens; ++t) {
    for (int64_t e = 0; e < int64_t{q_heads} * c.head_dim; ++e) {
      ASSERT_EQ(got[t * width + e], want[t * width + e]) << "q of token " << t << " elem " << e;
    }
    // v rows are read only; k rows are left unrotated (documented).
    for (int64_t e = int64_t{q_heads} * c.head_dim; e < width; ++e) {
      ASSERT_EQ(got[t * width + e], qkv[t * width + e]) << "token " << t << " elem " << e;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RopeKvTest,
    ::testing::Values(Case{RopeStyle::kNormal, 64, 64, KvDtype::kBf16, 16},
                      Case{RopeStyle::kNeox, 64, 64, KvDtype::kF16, 16},
                      Case{RopeStyle::kNeox, 128, 128, KvDtype::kInt8, 16},
                      Case{RopeStyle::kNormal, 128, 128, KvDtype::kInt8, 7},
                      Case{RopeStyle::kNeox, 128, 64, KvDtype::kBf16, 16},
                      Case{RopeStyle::kNormal, 128, 32, KvDtype::kInt8, 16}));

TEST(RopeKvArgsTest, RejectsBadShapes) {
  PagedKvView kv;
  kv.head_dim = 64;
  kv.block_size = 16;
  kv.num_kv_heads = 1;
  kv.dtype = KvDtype::kBf16;
  RopeKvArgs a;
  a.num_tokens = 1;
  a.rot_dim = 65;  // odd
  EXPECT_EQ(RopeAndWritePagedKv(a, kv, nullptr), cudaErrorInvalidValue);
  a.rot_dim = 128;  // > head_dim
  EXPECT_EQ(RopeAndWritePagedKv(a, kv, nullptr), cudaErrorInvalidValue);
  a.rot_dim = 64;
  kv.dtype = KvDtype::kInt8;  // no scales
  EXPECT_EQ(RopeAndWritePagedKv(a, kv, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace weft::kernels::cuda

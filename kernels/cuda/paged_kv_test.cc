// WritePagedKv and CopyKvBlocks against the host twin (testing/kv_reference.h): the
// same bytes, for every KV dtype, head sizes 64 and 128, 1/3/8 KV heads, block sizes 16
// and 7, padding slots (-1) skipped.
#include "kernels/cuda/paged_kv.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/testing/cuda_test_util.h"
#include "kernels/cuda/testing/kv_reference.h"

namespace weft::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::HostPagedKv;

struct WriteCase {
  KvDtype dtype;
  int32_t head_dim;
  int32_t num_kv_heads;
  int32_t block_size;
};

class WritePagedKvTest : public ::testing::TestWithParam<WriteCase> {};

TEST_P(WritePagedKvTest, MatchesHostTwinBytes) {
  WEFT_SKIP_WITHOUT_CUDA();
  const WriteCase c = GetParam();
  const int32_t num_blocks = 9;
  const int32_t num_tokens = 40;
  HostPagedKv host(c.dtype, num_blocks, c.block_size, c.num_kv_heads, c.head_dim);
  std::mt19937 rng(c.head_dim * 31 + c.num_kv_heads * 7 + c.block_size);
  std::normal_distribution<float> val(0.0f, 2.0f);
  const int32_t width = c.num_kv_heads * c.head_dim;
  const int64_t stride = 2 * width + 8;  // rows of a wider buffer, like the fused QKV output
  std::vector<float> kv(num_tokens * stride);
  for (float& x : kv) x = val(rng);
  // A whole zero group (int8 scale 0) and a huge value.
  for (int d = 0; d < 8; ++d) kv[3 * stride + d] = 0.0f;
  kv[5 * stride + 1] = 3.0e4f;
  std::vector<int64_t> slots(num_blocks * c.block_size);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(num_tokens);
  slots[7] = -1;
  slots[num_tokens - 1] = -1;
  for (int32_t t = 0; t < num_tokens; ++t) {
    host.Write(kv.data() + t * stride, kv.data() + t * stride + width, slots[t]);
  }

  DeviceArray<uint8_t> data(host.data().size());
  DeviceArray<uint16_t> scales(std::max<size_t>(host.scales().size(), 1));
  data.FillBytes(0);
  scales.FillBytes(0);
  DeviceArray<float> src(kv);
  DeviceArray<int64_t> dslots(slots);
  const PagedKvView view = host.View(data.get(), scales.get());
  WEFT_EXPECT_CUDA_OK(WritePagedKv(view, src.get(), src.get() + width, stride, dslots.get(),
                                   num_tokens, nullptr));
  EXPECT_EQ(data.ToHost(), host.data());
  if (c.dtype == KvDtype::kInt8) {
    std::vector<uint16_t> got = scales.ToHost();
    got.resize(host.scales().size());
    EXPECT_EQ(got, host.scales());
  }
}

std::vector<WriteCase> WriteCases() {
  std::vector<WriteCase> out;
  for (KvDtype dtype : {KvDtype::kF16, KvDtype::kBf16, KvDtype::kInt8}) {
    for (int32_t hd : {64, 128}) {
      for (int32_t heads : {1, 3, 8}) out.push_back({dtype, hd, heads, 16});
    }
    out.push_back({dtype, 64, 2, 7});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, WritePagedKvTest, ::testing::ValuesIn(WriteCases()));

TEST(CopyKvBlocksTest, CopiesWholeBlocksOnly) {
  WEFT_SKIP_WITHOUT_CUDA();
  const int64_t bytes_per_block = 16 * 1000;
  const int32_t num_blocks = 12;
  std::vector<uint8_t> pool(bytes_per_block * num_blocks);
  std::mt19937 rng(5);
  for (uint8_t& b : pool) b = static_cast<uint8_t>(rng());
  const std::vector<int32_t> pairs = {3, 7, 0, 11, 5, 2};
  std::vector<uint8_t> want = pool;
  for (size_t i = 0; i < pairs.size(); i += 2) {
    std::copy_n(pool.begin() + pairs[i] * bytes_per_block, bytes_per_block,
                want.begin() + pairs[i + 1] * bytes_per_block);
  }
  DeviceArray<uint8_t> dpool(pool);
  DeviceArray<int32_t> dpairs(pairs);
  WEFT_EXPECT_CUDA_OK(CopyKvBlocks(dpool.get(), bytes_per_block, dpairs.get(), 3, nullptr));
  EXPECT_EQ(dpool.ToHost(), want);
}

TEST(CopyKvBlocksTest, RejectsUnalignedBlocks) {
  EXPECT_EQ(CopyKvBlocks(nullptr, 24, nullptr, 1, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace weft::kernels::cuda

#include "worker/kv_pool.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace weft {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kMiB = int64_t{1} << 20;

// An 80 GiB card with 10 GiB in use after the weights load.
const DeviceMemory kCard{70 * kGiB, 80 * kGiB};

TEST(SizeDeviceKvPoolTest, UtilizationOfTotalLessWhatIsInUseAndTheReserve) {
  const int64_t per_block = 2 * kMiB;
  auto s = SizeDeviceKvPool(0, 0, 0.9, kCard, 512 * kMiB, per_block);
  ASSERT_TRUE(s.ok()) << s.status();
  // 0.9 x 80 GiB = 72 GiB allowed, 10 GiB in use, 0.5 GiB reserved: 61.5 GiB.
  const int64_t budget = 72 * kGiB - 10 * kGiB - 512 * kMiB;
  EXPECT_EQ(s->num_blocks, budget / per_block);
  EXPECT_EQ(s->bytes, s->num_blocks * per_block);
  EXPECT_NE(s->source.find("--gpu_memory_utilization=0.9"), std::string::npos) << s->source;
  EXPECT_NE(s->source.find(std::to_string(budget)), std::string::npos) << s->source;
}

TEST(SizeDeviceKvPoolTest, OtherProcessesMemoryCountsAgainstTheShare) {
  // The same card with 40 GiB used by another process: 72 - 50 GiB left.
  auto s = SizeDeviceKvPool(0, 0, 0.9, DeviceMemory{30 * kGiB, 80 * kGiB}, 0, kGiB);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->num_blocks, 22);
}

TEST(SizeDeviceKvPoolTest, ExplicitBlockCountOrBudgetWins) {
  auto blocks = SizeDeviceKvPool(100, 5 * kGiB, 0.9, kCard, 0, kMiB);
  ASSERT_TRUE(blocks.ok());
  EXPECT_EQ(blocks->num_blocks, 100);
  EXPECT_EQ(blocks->source, "--num_kv_blocks=100");
  auto bytes = SizeDeviceKvPool(0, 5 * kGiB, 0.9, kCard, 0, kMiB);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->num_blocks, 5 * 1024);
  EXPECT_EQ(bytes->source, "--kv_memory_bytes=" + std::to_string(5 * kGiB));
  // An explicit size is not checked against the device (as before): the allocation says.
  auto big = SizeDeviceKvPool(0, 200 * kGiB, 0.9, kCard, 0, kGiB);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->num_blocks, 200);
}

TEST(SizeDeviceKvPoolTest, NoRoomIsAnErrorWithTheFigures) {
  // 0.5 x 80 = 40 GiB allowed, but 60 GiB is already in use.
  auto s = SizeDeviceKvPool(0, 0, 0.5, DeviceMemory{20 * kGiB, 80 * kGiB}, 0, kMiB);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("no room for the KV pool"), std::string::npos);
  // Room for less than one block.
  EXPECT_FALSE(SizeDeviceKvPool(0, 0, 1.0, DeviceMemory{kMiB, 80 * kGiB}, 0, 2 * kMiB).ok());
}

TEST(SizeDeviceKvPoolTest, RefusesUtilizationOutsideItsRangeAndBadFigures) {
  for (double u : {0.0, -0.1, 1.01, 2.0}) {
    EXPECT_FALSE(SizeDeviceKvPool(0, 0, u, kCard, 0, kMiB).ok()) << u;
    EXPECT_FALSE(ValidateGpuMemoryUtilization(u).ok()) << u;
  }
  EXPECT_TRUE(ValidateGpuMemoryUtilization(1.0).ok());
  EXPECT_FALSE(SizeDeviceKvPool(0, 0, 0.9, DeviceMemory{81 * kGiB, 80 * kGiB}, 0, kMiB).ok());
  EXPECT_FALSE(SizeDeviceKvPool(0, 0, 0.9, DeviceMemory{0, 0}, 0, kMiB).ok());
  EXPECT_FALSE(SizeDeviceKvPool(0, 0, 0.9, kCard, -1, kMiB).ok());
}

}  // namespace
}  // namespace weft

#include "worker/comm/communicator.h"

#include <vector>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

using ::weft::testing::StatusIs;

TEST(LocalCommunicatorTest, CollectivesAreIdentityForOneRank) {
  LocalCommunicator comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.world_size(), 1);
  std::vector<float> data = {1.5f, -2.f, 3.f};
  ASSERT_TRUE(comm.AllReduceSum(data.data(), data.size()).ok());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.f, 3.f}));

  std::vector<float> out(3);
  ASSERT_TRUE(comm.AllGather(data.data(), 3, out.data()).ok());
  EXPECT_EQ(out, data);
  ASSERT_TRUE(comm.AllGatherV(data.data(), 3, {3}, out.data()).ok());
  EXPECT_EQ(out, data);

  int value = 7;
  EXPECT_TRUE(comm.Broadcast(&value, sizeof(value), 0).ok());
  EXPECT_EQ(value, 7);
  EXPECT_EQ(comm.Broadcast(&value, sizeof(value), 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(comm.Barrier().ok());
}

TEST(LocalCommunicatorTest, AbortIsStickyAndKeepsFirstReason) {
  LocalCommunicator comm;
  comm.Abort("first");
  comm.Abort("second");
  float x = 1.f;
  const absl::Status status = comm.AllReduceSum(&x, 1);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kAborted));
  EXPECT_NE(status.message().find("first"), absl::string_view::npos) << status;
  EXPECT_THAT(comm.Barrier(), StatusIs(absl::StatusCode::kAborted));
  EXPECT_THAT(comm.AllGatherV(&x, 1, {1}, &x + 0), StatusIs(absl::StatusCode::kAborted));
}

TEST(LocalCommunicatorTest, TimeoutIsAdjustable) {
  LocalCommunicator comm(absl::Seconds(3));
  EXPECT_EQ(comm.timeout(), absl::Seconds(3));
  comm.SetTimeout(absl::Milliseconds(250));
  EXPECT_EQ(comm.timeout(), absl::Milliseconds(250));
}

TEST(ValidateAllGatherVTest, RejectsMisuse) {
  std::vector<float> in(4), out(16);
  EXPECT_TRUE(ValidateAllGatherV(1, 3, in.data(), 2, {1, 2, 3}, out.data()).ok());
  EXPECT_EQ(ValidateAllGatherV(1, 3, in.data(), 2, {1, 2}, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateAllGatherV(1, 3, in.data(), 3, {1, 2, 3}, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateAllGatherV(1, 3, nullptr, 2, {1, 2, 3}, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateAllGatherV(1, 3, in.data(), 2, {1, 2, 3}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  // out overlapping in.
  EXPECT_EQ(ValidateAllGatherV(1, 3, out.data() + 2, 2, {1, 2, 3}, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  // Zero counts need no buffers.
  EXPECT_TRUE(ValidateAllGatherV(0, 2, nullptr, 0, {0, 0}, nullptr).ok());
}

}  // namespace
}  // namespace weft

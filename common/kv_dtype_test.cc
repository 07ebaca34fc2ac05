#include "common/kv_dtype.h"

#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(KvDtypeTest, NamesParseBack) {
  for (KvDtype d : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBf16, KvDtype::kInt8}) {
    absl::StatusOr<KvDtype> parsed = ParseKvDtype(KvDtypeName(d));
    ASSERT_TRUE(parsed.ok()) << KvDtypeName(d);
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(*ParseKvDtype("fp16"), KvDtype::kF16);  // the CUDA backend's old name
  EXPECT_EQ(ParseKvDtype("fp8").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseKvDtype("").status().code(), absl::StatusCode::kInvalidArgument);
}

// The CUDA kernels take these values as runtime codes.
TEST(KvDtypeTest, DeviceCodesAreStable) {
  EXPECT_EQ(static_cast<int>(KvDtype::kF16), 0);
  EXPECT_EQ(static_cast<int>(KvDtype::kBf16), 1);
  EXPECT_EQ(static_cast<int>(KvDtype::kInt8), 2);
  EXPECT_EQ(kDefaultKvDtype, KvDtype::kF16);
}

}  // namespace
}  // namespace weft

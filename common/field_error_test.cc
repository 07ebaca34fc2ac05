#include "common/field_error.h"

#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(FieldErrorTest, TheFieldTravelsAsDataUnderItsSchema) {
  const absl::Status s = FieldErrorStatus("api", FieldError{"sampling.top_p", "must be in (0, 1]"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "sampling.top_p: must be in (0, 1]");
  const std::optional<FieldError> e = GetFieldError(s, "api");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->field, "sampling.top_p");
  EXPECT_EQ(e->reason, "must be in (0, 1]");
  EXPECT_FALSE(GetFieldError(s, "other schema").has_value());
  // A copy keeps it; a status without one (even one whose message looks alike) has none.
  const absl::Status copy = s;
  EXPECT_TRUE(GetFieldError(copy, "api").has_value());
  EXPECT_FALSE(GetFieldError(absl::InvalidArgumentError("n: bad"), "api").has_value());
  EXPECT_FALSE(GetFieldError(absl::OkStatus(), "api").has_value());
}

}  // namespace
}  // namespace weft

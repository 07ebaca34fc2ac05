// gMock matchers for absl::Status and absl::StatusOr<T> (Debian's Abseil has none):
//   EXPECT_THAT(s, IsOk());
//   EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
//   EXPECT_THAT(s, StatusIs(absl::StatusCode::kNotFound, HasSubstr("model")));
// A failure prints the whole status (code and message), not just two codes.
// Thread-safety: stateless.
#ifndef WEFT_COMMON_TESTING_STATUS_MATCHERS_H_
#define WEFT_COMMON_TESTING_STATUS_MATCHERS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace weft::testing {

inline const absl::Status& StatusOf(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

MATCHER(IsOk, negation ? "is not OK" : "is OK") {
  const absl::Status& s = ::weft::testing::StatusOf(arg);
  *result_listener << "whose status is " << s;
  return s.ok();
}

MATCHER_P(StatusIs, code,
          std::string(negation ? "has a status code other than " : "has status code ") +
              absl::StatusCodeToString(code)) {
  const absl::Status& s = ::weft::testing::StatusOf(arg);
  *result_listener << "whose status is " << s;
  return s.code() == code;
}

MATCHER_P2(StatusIs, code, message,
           std::string(negation ? "has not status code " : "has status code ") +
               absl::StatusCodeToString(code) + " and a message that " +
               ::testing::DescribeMatcher<std::string>(message, negation)) {
  const absl::Status& s = ::weft::testing::StatusOf(arg);
  *result_listener << "whose status is " << s;
  return s.code() == code &&
         ::testing::ExplainMatchResult(message, std::string(s.message()), result_listener);
}

}  // namespace weft::testing

#endif  // WEFT_COMMON_TESTING_STATUS_MATCHERS_H_

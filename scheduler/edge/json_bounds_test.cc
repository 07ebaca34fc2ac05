#include "scheduler/edge/json_bounds.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "scheduler/edge/openai_json.h"

namespace weft {
namespace {

std::string ObjectOfKeys(size_t n) {
  std::string s = "{";
  for (size_t i = 0; i < n; ++i) absl::StrAppend(&s, i ? "," : "", "\"k", i, "\":0");
  return s + "}";
}

std::string Nested(int depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

TEST(JsonBoundsTest, AcceptsWithinBounds) {
  EXPECT_TRUE(CheckJsonBounds(R"({"prompt": "hi", "stop": ["a", "b"], "n": 1})").ok());
  EXPECT_TRUE(CheckJsonBounds(ObjectOfKeys(256)).ok());
  EXPECT_TRUE(CheckJsonBounds(Nested(64)).ok());
  // Arrays are not members: a long token list is fine.
  std::string ids = "[0";
  for (int i = 1; i < 100000; ++i) absl::StrAppend(&ids, ",", i);
  EXPECT_TRUE(CheckJsonBounds(absl::StrCat("{\"prompt\":", ids, "]}")).ok());
}

TEST(JsonBoundsTest, RefusesTooManyMembersInOneObject) {
  const absl::Status s = CheckJsonBounds(ObjectOfKeys(257));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("more than 256 members"), absl::string_view::npos) << s;
  // Counted per object: many small objects are fine.
  std::string many = "[";
  for (int i = 0; i < 1000; ++i) absl::StrAppend(&many, i ? "," : "", ObjectOfKeys(10));
  EXPECT_TRUE(CheckJsonBounds(many + "]").ok());
  // Duplicates count (each is an insertion).
  std::string dup = "{";
  for (int i = 0; i < 300; ++i) absl::StrAppend(&dup, i ? "," : "", "\"k\":0");
  EXPECT_FALSE(CheckJsonBounds(dup + "}").ok());
}

TEST(JsonBoundsTest, RefusesDeepNesting) {
  const absl::Status s = CheckJsonBounds(Nested(65));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("nested more than 64"), absl::string_view::npos) << s;
  // A deep unterminated prefix is refused at its 65th level, not read to its end.
  EXPECT_FALSE(CheckJsonBounds(std::string(1 << 20, '[')).ok());
}

TEST(JsonBoundsTest, RefusesInvalidJson) {
  EXPECT_EQ(CheckJsonBounds("{\"a\":").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckJsonBounds("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckJsonBounds("{} x").code(), absl::StatusCode::kInvalidArgument);
}

TEST(JsonBoundsTest, TheOpenAiParserAppliesThem) {
  const auto parsed = openai::ParseRequest(openai::Api::kCompletions, ObjectOfKeys(300));
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("members"), absl::string_view::npos);
}

}  // namespace
}  // namespace weft

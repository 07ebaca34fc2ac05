#include "scheduler/edge/openai_structured.h"

#include <gtest/gtest.h>

#include <string>

#include "common/field_error.h"
#include "nlohmann/json.hpp"
#include "scheduler/edge/openai_json.h"

namespace weft::openai {
namespace {

using Json = nlohmann::ordered_json;

weft::v1::GenerateRequest Map(const std::string& body) {
  weft::v1::GenerateRequest r;
  const absl::Status s = ParseResponseFormat(Json::parse(body), &r);
  EXPECT_TRUE(s.ok()) << s << " for " << body;
  return r;
}

std::string FailedParam(const std::string& body) {
  weft::v1::GenerateRequest r;
  const absl::Status s = ParseResponseFormat(Json::parse(body), &r);
  if (s.ok()) return "";
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  auto e = GetFieldError(s, kBodyFieldSchema);
  return e ? e->field : "?";
}

TEST(OpenAiStructuredTest, ResponseFormatsMapToConstraints) {
  EXPECT_FALSE(Map(R"({})").has_constraint());
  EXPECT_FALSE(Map(R"({"response_format": null})").has_constraint());
  EXPECT_FALSE(Map(R"({"response_format": {"type": "text"}})").has_constraint());
  EXPECT_TRUE(Map(R"({"response_format": {"type": "json_object"}})").constraint().has_json_object());
  const auto r = Map(R"({"response_format": {"type": "json_schema", "json_schema": {
      "name": "person", "strict": true,
      "schema": {"type": "object", "properties": {"age": {"type": "integer"}}}}}})");
  ASSERT_EQ(r.constraint().kind_case(), weft::v1::Constraint::kJsonSchema);
  // The schema's own JSON text, key order kept.
  EXPECT_EQ(r.constraint().json_schema(),
            R"({"type":"object","properties":{"age":{"type":"integer"}}})");
}

TEST(OpenAiStructuredTest, MalformedResponseFormatsNameTheField) {
  EXPECT_EQ(FailedParam(R"({"response_format": "json"})"), "response_format.type");
  EXPECT_EQ(FailedParam(R"({"response_format": {"type": "yaml"}})"), "response_format.type");
  EXPECT_EQ(FailedParam(R"({"response_format": {"type": "json_schema"}})"),
            "response_format.json_schema");
  EXPECT_EQ(FailedParam(R"({"response_format": {"type": "json_schema", "json_schema": {}}})"),
            "response_format.json_schema.schema");
  EXPECT_EQ(FailedParam(R"({"response_format": {"type": "json_schema",
                            "json_schema": {"schema": {}, "strict": "yes"}}})"),
            "response_format.json_schema.strict");
  EXPECT_EQ(FailedParam(R"({"response_format": {"type": "json_schema",
                            "json_schema": {"schema": {}, "name": 3}}})"),
            "response_format.json_schema.name");
}

// Through the whole parser: a chat body with a schema becomes a constrained request.
TEST(OpenAiStructuredTest, ChatBodiesCarryTheConstraint) {
  auto p = ParseRequest(Api::kChatCompletions, R"({"messages": [{"role": "user", "content": "hi"}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "x",
      "schema": {"enum": ["a", "b"]}}}})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->request.constraint().json_schema(), R"({"enum":["a","b"]})");
}

}  // namespace
}  // namespace weft::openai

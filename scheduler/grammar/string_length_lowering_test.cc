#include "scheduler/grammar/string_length_lowering.h"

#include <string>

#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(StringLengthLoweringTest, BoundedStringsEverywhereBecomePatternsInOrder) {
  const std::string schema =
      R"({"type":"object","properties":{"z":{"type":"string","maxLength":20},)"
      R"("a":{"type":"array","items":{"type":"string","minLength":2,"maxLength":8},"maxItems":3},)"
      R"("m":{"anyOf":[{"type":"string","minLength":1,"maxLength":1},{"type":"null"}]}},)"
      R"("$defs":{"d":{"type":"string","maxLength":0}}})";
  LoweredSchema l = LowerStringLengths(schema);
  EXPECT_EQ(l.num_lowered, 4);
  EXPECT_EQ(l.schema,
            R"({"type":"object","properties":{"z":{"type":"string","pattern":"^[^\"\\\\]{0,20}$"},)"
            R"("a":{"type":"array","items":{"type":"string","pattern":"^[^\"\\\\]{2,8}$"},"maxItems":3},)"
            R"("m":{"anyOf":[{"type":"string","pattern":"^[^\"\\\\]{1,1}$"},{"type":"null"}]}},)"
            R"("$defs":{"d":{"type":"string","pattern":"^[^\"\\\\]{0,0}$"}}})");
}

TEST(StringLengthLoweringTest, LeavesWhatXGrammarHandlesOtherwiseUnchanged) {
  for (const std::string& schema : {
           // no length bound; a minimum alone (unbounded above); above the unrolled limit
           std::string(R"({"type":"string"})"),
           std::string(R"({"type":"string","minLength":3})"),
           std::string(R"({"type":"string","maxLength":129})"),
           // a pattern, format, enum or const decides the string
           std::string(R"({"type":"string","maxLength":5,"pattern":"^a+$"})"),
           std::string(R"({"type":"string","maxLength":5,"format":"date"})"),
           std::string(R"({"type":"string","maxLength":5,"enum":["a"]})"),
           std::string(R"({"type":"string","maxLength":5,"const":"a"})"),
           // bounds XGrammar must judge: not integers, negative, min above max
           std::string(R"({"type":"string","maxLength":5.5})"),
           std::string(R"({"type":"string","maxLength":-1})"),
           std::string(R"({"type":"string","minLength":6,"maxLength":5})"),
           // a type list; literal data that looks like a schema
           std::string(R"({"type":["string","null"],"maxLength":5})"),
           std::string(R"({"enum":[{"type":"string","maxLength":5}]})"),
           std::string(R"({"const":{"type":"string","maxLength":5}})"),
           std::string(R"({"default":{"type":"string","maxLength":5}})"),
           // not a JSON object at all
           std::string("[1,2"), std::string("true")}) {
    LoweredSchema l = LowerStringLengths(schema);
    EXPECT_EQ(l.num_lowered, 0) << schema;
    EXPECT_EQ(l.schema, schema);
  }
}

TEST(StringLengthLoweringTest, ExactlyAtTheUnrolledLimitIsLowered) {
  LoweredSchema l = LowerStringLengths(R"({"type":"string","maxLength":128})");
  EXPECT_EQ(l.num_lowered, 1);
  EXPECT_EQ(l.schema, R"({"type":"string","pattern":"^[^\"\\\\]{0,128}$"})");
}

}  // namespace
}  // namespace weft

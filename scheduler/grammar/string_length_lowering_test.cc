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
            R"({"type":"object","properties":{"z":{"type":"string",)"
            R"("pattern":"^(weft){0}[^\"\\\\]{0,20}$"},)"
            R"("a":{"type":"array","items":{"type":"string",)"
            R"("pattern":"^(weft){0}[^\"\\\\]{2,8}$"},"maxItems":3},)"
            R"("m":{"anyOf":[{"type":"string","pattern":"^(weft){0}[^\"\\\\]{1,1}$"},)"
            R"({"type":"null"}]}},)"
            R"("$defs":{"d":{"type":"string","pattern":"^(weft){0}[^\"\\\\]{0,0}$"}}})");
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
  EXPECT_EQ(l.schema, R"({"type":"string","pattern":"^(weft){0}[^\"\\\\]{0,128}$"})");
}

TEST(StringLengthLoweringTest, StructuralTagSchemasAreLoweredAndNothingElse) {
  const std::string tag =
      R"({"type":"structural_tag","format":{"type":"tags_with_separator","tags":[)"
      R"({"type":"tag","begin":"<a>","content":{"type":"json_schema","json_schema":)"
      R"({"type":"object","properties":{"c":{"type":"string","maxLength":20}}},)"
      R"("max_whitespace_cnt":1},"end":"</a>"},)"
      // a schema given as text, and an object that only looks like a bounded string
      R"({"type":"tag","begin":"<b>","content":{"type":"json_schema","json_schema":)"
      R"("{\"type\":\"string\",\"maxLength\":3}"},"end":"</b>"},)"
      R"({"type":"tag","begin":"<d>","content":{"type":"string","maxLength":3},"end":"</d>"}],)"
      R"("separator":"\n"}})";
  LoweredSchema l = LowerStructuralTagStrings(tag);
  EXPECT_EQ(l.num_lowered, 1);
  std::string expected = tag;
  const std::string bounded = R"({"type":"string","maxLength":20})";
  expected.replace(expected.find(bounded), bounded.size(),
                   R"({"type":"string","pattern":"^(weft){0}[^\"\\\\]{0,20}$"})");
  EXPECT_EQ(l.schema, expected);
  EXPECT_EQ(LowerStructuralTagStrings("[1").schema, "[1");
}

TEST(StringLengthLoweringTest, MarkerIsWhatThePatternSays) {
  EXPECT_EQ(BoundedStringMarker(2, 8), "^(weft){0}[^\"\\\\]{2,8}$");
}

// The regex of a JSON string body: what each alternative is (checked as text here; the
// language itself is checked through XGrammar in grammar_engine_test).
TEST(StringLengthLoweringTest, RegexIsJsonStringBodyWithEscapesCountedOnce) {
  EXPECT_EQ(BoundedStringRegex(1, 3),
            R"(^([^"\\\x00-\x1f]|\\(["\\/bfnrt]|u([0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|)"
            R"([dD][0-7][0-9a-fA-F]{2}|)"
            R"([dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}))){1,3}$)");
}

TEST(StringLengthLoweringTest, ExpandReplacesExactlyThePrintedMarkers) {
  const std::string marker = R"(Regex("^(weft){0}[^\"\\\\]{0,20}$", json_string=true))";
  const std::string ebnf = "root ::= (\"\\\"\" " + marker + " \"\\\"\")\n"
                           "b ::= " + R"(Regex("^(weft){0}[^\"\\\\]{2,8}$", json_string=true))" +
                           "\n"
                           // a schema's own pattern, a malformed count, a marker without the flag
                           R"(c ::= Regex("^[^\"\\\\]{0,20}$", json_string=true))" "\n"
                           R"(d ::= Regex("^(weft){0}[^\"\\\\]{1234,5}$", json_string=true))" "\n"
                           R"(e ::= Regex("^(weft){0}[^\"\\\\]{0,20}$"))" "\n";
  int n = -1;
  const std::string out = ExpandBoundedStrings(ebnf, &n);
  EXPECT_EQ(n, 2);
  auto printed = [](const std::string& regex) {
    std::string s = "Regex(\"";
    for (char c : regex) {
      if (c == '"' || c == '\\') s += '\\';
      s += c;
    }
    return s + "\")";
  };
  EXPECT_EQ(out, "root ::= (\"\\\"\" " + printed(BoundedStringRegex(0, 20)) + " \"\\\"\")\n" +
                     "b ::= " + printed(BoundedStringRegex(2, 8)) + "\n" +
                     ebnf.substr(ebnf.find("c ::= ")));
  EXPECT_EQ(ExpandBoundedStrings("root ::= \"a\"", &n), "root ::= \"a\"");
  EXPECT_EQ(n, 0);
}

}  // namespace
}  // namespace weft

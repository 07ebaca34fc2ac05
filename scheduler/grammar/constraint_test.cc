#include "scheduler/grammar/constraint.h"

#include <string>

#include "gtest/gtest.h"

namespace weft {
namespace {

using Kind = GrammarConstraint::Kind;

GrammarConstraint Make(Kind kind, std::string source) {
  GrammarConstraint c;
  c.kind = kind;
  c.source = std::move(source);
  return c;
}

TEST(ConstraintTest, AcceptsBoundedConstraints) {
  ConstraintLimits lim;
  EXPECT_FALSE(CheckConstraint(Make(Kind::kJsonSchema, R"({"type":"object"})"), lim));
  EXPECT_FALSE(CheckConstraint(Make(Kind::kJsonObject, ""), lim));
  EXPECT_FALSE(CheckConstraint(Make(Kind::kRegex, "[0-9]+"), lim));
  EXPECT_FALSE(CheckConstraint(Make(Kind::kEbnf, "root ::= \"a\""), lim));
  GrammarConstraint choice;
  choice.kind = Kind::kChoice;
  choice.choices = {"yes", "no"};
  EXPECT_FALSE(CheckConstraint(choice, lim));
}

TEST(ConstraintTest, RefusesEmptyOversizedAndDeepSources) {
  ConstraintLimits lim;
  lim.max_source_bytes = 64;
  lim.max_json_depth = 3;
  auto e = CheckConstraint(Make(Kind::kRegex, ""), lim);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "regex");
  e = CheckConstraint(Make(Kind::kEbnf, std::string(65, 'a')), lim);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "grammar");
  EXPECT_NE(e->reason.find("over the limit of 64"), std::string::npos) << e->reason;
  // Depth 4 of real nesting is refused; brackets inside strings do not count.
  e = CheckConstraint(Make(Kind::kJsonSchema, R"({"a":{"b":[{"c":1}]}})"), lim);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "json_schema");
  EXPECT_NE(e->reason.find("nested 4 deep"), std::string::npos) << e->reason;
  EXPECT_FALSE(CheckConstraint(Make(Kind::kJsonSchema, R"({"a":"{{{{[[[[\"{{"})"), lim));
  e = CheckConstraint(Make(Kind::kRegex, std::string("\xff\xfe")), lim);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->reason, "not valid UTF-8");
  e = CheckConstraint(Make(Kind::kJsonObject, "x"), lim);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "json_object");
}

TEST(ConstraintTest, RefusesBadChoiceLists) {
  ConstraintLimits lim;
  lim.max_choices = 2;
  lim.max_choice_bytes = 4;
  GrammarConstraint c;
  c.kind = Kind::kChoice;
  ASSERT_TRUE(CheckConstraint(c, lim));
  c.choices = {"a", "b", "c"};
  EXPECT_EQ(CheckConstraint(c, lim)->field, "choice");
  c.choices = {"a", ""};
  EXPECT_EQ(CheckConstraint(c, lim)->field, "choice[1]");
  c.choices = {"abcde"};
  EXPECT_EQ(CheckConstraint(c, lim)->field, "choice[0]");
}

TEST(ConstraintTest, CacheKeySeparatesKindsSourcesAndChoiceBoundaries) {
  GrammarConstraint a = Make(Kind::kRegex, "abc");
  GrammarConstraint b = Make(Kind::kEbnf, "abc");
  EXPECT_NE(a.CacheKey(), b.CacheKey());
  EXPECT_EQ(a.CacheKey(), Make(Kind::kRegex, "abc").CacheKey());
  GrammarConstraint c1, c2;
  c1.kind = c2.kind = Kind::kChoice;
  c1.choices = {"ab", "c"};
  c2.choices = {"a", "bc"};
  EXPECT_NE(c1.CacheKey(), c2.CacheKey());
}

}  // namespace
}  // namespace weft

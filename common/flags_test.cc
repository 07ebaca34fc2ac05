#include "common/flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/flags/flag.h"

ABSL_FLAG(int32_t, flags_test_count, 1, "a number");
ABSL_FLAG(bool, flags_test_switch, false, "a switch");
ABSL_FLAG(std::string, flags_test_name, "", "a string");

namespace weft {
namespace {

std::string Check(std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return CheckFlags(static_cast<int>(argv.size()), argv.data());
}

TEST(FlagsTest, AcceptsDefinedFlagsInEveryForm) {
  EXPECT_EQ(Check({"--flags_test_count=3", "-flags_test_name", "x y", "--flags_test_switch",
                   "--noflags_test_switch", "--flags_test_switch=false", "positional"}),
            "");
  EXPECT_EQ(absl::GetFlag(FLAGS_flags_test_name), "x y");
  EXPECT_EQ(absl::GetFlag(FLAGS_flags_test_count), 3);
  EXPECT_EQ(Check({"--", "--not_a_flag"}), "");  // after "--": positional
  EXPECT_EQ(Check({"--help"}), "");              // Abseil's usage flags pass through
  EXPECT_EQ(Check({"--flagfile=/nonexistent"}), "");
}

TEST(FlagsTest, RejectsUnknownFlagsAndBadValues) {
  EXPECT_EQ(Check({"--no_such_flag=1"}), "unknown flag --no_such_flag");
  EXPECT_EQ(Check({"--noflags_test_count"}), "unknown flag --noflags_test_count");
  EXPECT_EQ(Check({"--flags_test_name"}), "flag --flags_test_name needs a value");
  const std::string bad = Check({"--flags_test_count=abc"});
  EXPECT_EQ(bad.rfind("bad value for --flags_test_count", 0), 0u) << bad;
  EXPECT_NE(Check({"--flags_test_switch=maybe"}), "");
}

TEST(FlagsTest, RepeatedFlagValuesKeepsEveryOccurrence) {
  std::vector<std::string> args = {"prog",        "--stop=a,b", "-stop", "c",
                                   "--stopper=x", "--stop=",    "--",    "--stop=z"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  EXPECT_EQ(RepeatedFlagValues(static_cast<int>(argv.size()), argv.data(), "stop"),
            (std::vector<std::string>{"a,b", "c", ""}));
}

TEST(FlagsTest, HelpListsFilesOutsideAbseil) {
  EXPECT_TRUE(IsWeftFlagFile("scheduler/service/scheduler_main.cc"));
  EXPECT_TRUE(IsWeftFlagFile("tools/cli/weft_main.cc"));
  EXPECT_FALSE(IsWeftFlagFile("./absl/flags/parse.cc"));
}

}  // namespace
}  // namespace weft

#include "common/build_info.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "re2/re2.h"

namespace weft {
namespace {

// The stamp is a version from VERSION and a revision that is a commit (clean or dirty)
// or, explicitly, "unknown" — never empty, never a leftover placeholder.
TEST(BuildInfoTest, VersionAndRevisionAreStamped) {
  EXPECT_TRUE(RE2::FullMatch(std::string(BuildVersion()), R"(\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?)"))
      << BuildVersion();
  EXPECT_TRUE(RE2::FullMatch(std::string(BuildRevision()), R"([0-9a-f]{40}(-dirty)?|unknown)"))
      << BuildRevision();
  EXPECT_EQ(VersionLine("weft-x"),
            absl::StrCat("weft-x ", BuildVersion(), " (revision ", BuildRevision(), ")"));
}

}  // namespace
}  // namespace weft

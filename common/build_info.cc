#include "common/build_info.h"

#include "absl/strings/str_cat.h"
#include "common/build_info_stamp.inc"  // WEFT_BUILD_VERSION, WEFT_BUILD_REVISION

namespace weft {

absl::string_view BuildVersion() { return WEFT_BUILD_VERSION; }

absl::string_view BuildRevision() { return WEFT_BUILD_REVISION; }

std::string VersionLine(absl::string_view program) {
  return absl::StrCat(program, " ", BuildVersion(), " (revision ", BuildRevision(), ")");
}

}  // namespace weft

// The build's identity, one definition for every binary and the images: the release
// version (the repository's VERSION file) and the source revision (git's commit at build
// time, stamped through Bazel's workspace status: tools/workspace_status.sh; "-dirty"
// when the tree had uncommitted changes; "unknown" when built outside a git checkout or
// without the status command). Printed by every binary's --version (common/flags.h) and
// exported as weft_build_info{version, revision}.
//
// Thread-safety: constants.
#ifndef WEFT_COMMON_BUILD_INFO_H_
#define WEFT_COMMON_BUILD_INFO_H_

#include <string>

#include "absl/strings/string_view.h"

namespace weft {

// The VERSION file's content, e.g. "0.1.0".
absl::string_view BuildVersion();

// The git commit the binary was built from, "<sha>-dirty", or "unknown".
absl::string_view BuildRevision();

// What --version prints: "<program> <version> (revision <revision>)".
std::string VersionLine(absl::string_view program);

}  // namespace weft

#endif  // WEFT_COMMON_BUILD_INFO_H_

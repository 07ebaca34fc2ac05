#include "common/testing/test_certs.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"

namespace weft::testing {

absl::StatusOr<std::string> MakeTestCerts() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  const std::string script =
      srcdir != nullptr && ws != nullptr
          ? absl::StrCat(srcdir, "/", ws, "/common/testing/make_test_certs.sh")
          : "common/testing/make_test_certs.sh";
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string templ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/certs-XXXXXX");
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::string dir = buf.data();
  const std::string cmd = absl::StrCat("bash '", script, "' '", dir, "' 2>&1");
  if (std::system(cmd.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("'", cmd, "' failed (is openssl installed?)"));
  }
  return dir;
}

}  // namespace weft::testing

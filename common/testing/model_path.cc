#include "common/testing/model_path.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdlib>

namespace weft::testing {
namespace {

bool IsFile(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string Dirname(const std::string& p) {
  const size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

}  // namespace

std::string FindModelFile(const std::string& file) {
  if (const char* dir = std::getenv("WEFT_MODEL_DIR"); dir != nullptr && *dir != '\0') {
    const std::string p = std::string(dir) + "/" + file;
    if (IsFile(p)) return p;
  }
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && ws != nullptr) {
    const std::string marker = std::string(srcdir) + "/" + ws + "/tools/models.txt";
    char resolved[PATH_MAX];
    if (::realpath(marker.c_str(), resolved) != nullptr) {
      const std::string p = Dirname(Dirname(resolved)) + "/models/" + file;
      if (IsFile(p)) return p;
    }
  }
  const std::string local = "models/" + file;
  if (IsFile(local)) return local;
  return "";
}

}  // namespace weft::testing

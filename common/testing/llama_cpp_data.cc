#include "common/testing/llama_cpp_data.h"

#include <sys/stat.h>

#include <cstdlib>

namespace weft::testing {
namespace {

bool IsDir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

std::string LlamaCppDataDir() {
  if (const char* dir = std::getenv("WEFT_LLAMA_CPP_DIR"); dir != nullptr && *dir != '\0') {
    return IsDir(std::string(dir) + "/models") ? dir : "";
  }
  const char* srcdir = std::getenv("TEST_SRCDIR");
  if (srcdir == nullptr) return "";
  // External repositories' runfiles: $TEST_SRCDIR/<repo>/ (and the legacy
  // $TEST_SRCDIR/<workspace>/external/<repo>/).
  for (const std::string& base : {std::string(srcdir) + "/llama_cpp",
                                  std::string(srcdir) + "/weft/external/llama_cpp"}) {
    if (IsDir(base + "/models")) return base;
  }
  return "";
}

}  // namespace weft::testing

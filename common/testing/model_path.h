// Locating the default model from tests and tools.
//
// Looks in $WEFT_MODEL_DIR, then in models/ of the source tree (found through the
// runfiles symlink of tools/models.txt, which tests list in `data`), then ./models.
// Thread-safety: pure functions.
#ifndef WEFT_COMMON_TESTING_MODEL_PATH_H_
#define WEFT_COMMON_TESTING_MODEL_PATH_H_

#include <string>

namespace weft::testing {

inline constexpr char kDefaultModelFile[] = "SmolLM2-135M-Instruct.Q4_1.gguf";

// Full path of `file` if it exists in one of the places above, else "".
std::string FindModelFile(const std::string& file = kDefaultModelFile);

}  // namespace weft::testing

// In a gtest body: sets `var` to the default model's path or skips the test.
#define WEFT_REQUIRE_DEFAULT_MODEL(var)                                                  \
  const std::string var = ::weft::testing::FindModelFile();                           \
  if (var.empty()) {                                                                  \
    GTEST_SKIP() << "default model not found (run tools/bootstrap.sh, or set "        \
                    "WEFT_MODEL_DIR)";                                                \
  }

#endif  // WEFT_COMMON_TESTING_MODEL_PATH_H_

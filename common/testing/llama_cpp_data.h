// Locating the llama.cpp source subset tools/bootstrap.sh extracts from the
// llama-cpp-python sdist (vocabulary GGUFs with .inp/.out pairs, chat templates).
//
// Tests list `@llama_cpp//:vocabs` / `@llama_cpp//:templates` and `@llama_cpp//:LICENSE`
// in `data`; the folder is found through the runfiles of LICENSE, or $WEFT_LLAMA_CPP_DIR
// (a folder with models/ and LICENSE) outside Bazel.
// Thread-safety: pure functions.
#ifndef WEFT_COMMON_TESTING_LLAMA_CPP_DATA_H_
#define WEFT_COMMON_TESTING_LLAMA_CPP_DATA_H_

#include <string>

namespace weft::testing {

// The folder holding models/ (ggml-vocab-*.gguf, templates/), or "" when not found.
std::string LlamaCppDataDir();

}  // namespace weft::testing

// In a gtest body: sets `var` to LlamaCppDataDir() or skips the test.
#define WEFT_REQUIRE_LLAMA_CPP_DATA(var)                                              \
  const std::string var = ::weft::testing::LlamaCppDataDir();                         \
  if (var.empty()) {                                                                  \
    GTEST_SKIP() << "llama.cpp test data not found (run tools/bootstrap.sh, or set "  \
                    "WEFT_LLAMA_CPP_DIR)";                                            \
  }

#endif  // WEFT_COMMON_TESTING_LLAMA_CPP_DATA_H_

// Test helpers for the tokenizer's reference data: a small JSON reader (enough for the
// JSON Lines files tools/refdata/make_tokenizer_ref.py writes: objects, arrays, strings
// with \uXXXX escapes and surrogate pairs, integers, true/false/null) and runfiles
// lookup of tests/testdata/.
//
// Test-only. Thread-safety: value types and pure functions.
#ifndef WEFT_COMMON_TOKENIZER_TEST_UTIL_H_
#define WEFT_COMMON_TOKENIZER_TEST_UTIL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer.h"

namespace weft::testing {

struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool b = false;
  double number = 0;
  std::string str;  // UTF-8 (a lone surrogate escape is kept as its 3-byte form)
  std::vector<JsonValue> array;
  std::map<std::string, JsonValue> object;

  // Object member or nullptr.
  const JsonValue* Get(absl::string_view key) const;
  // Array of numbers as int32.
  std::vector<int32_t> Ints() const;
};

absl::StatusOr<JsonValue> ParseJson(absl::string_view text);

// Reads a whole file.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Path of tests/testdata/<name> in the test's runfiles (or the source tree when not
// run by Bazel).
std::string TestDataPath(const std::string& name);

// Lower-case hex -> bytes (empty on malformed input).
std::string FromHex(absl::string_view hex);

// A reference entry's text: "text_hex" (bytes that are not UTF-8) or "text".
std::string EntryBytes(const JsonValue& e);

// FNV-1a 64 over every token's piece (4-byte little-endian length, then the bytes), as
// tools/refdata/make_tokenizer_ref.py hashes them; lower-case hex.
std::string PiecesFnv1a64(const Tokenizer& tok, bool render_special);

}  // namespace weft::testing

#endif  // WEFT_COMMON_TOKENIZER_TEST_UTIL_H_

// Pre-tokenizer: splits text into the words that byte-level BPE then encodes one by one,
// exactly as llama.cpp does for `tokenizer.ggml.pre = smollm` (and the other
// pre-tokenizer names that share its two regexes):
//
//   pass 1: \p{N}                 every number code point is a word of its own;
//   pass 2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//           applied inside each piece that pass 1 left, with llama.cpp's hand-written
//           matcher (unicode_regex_split_custom_gpt2): the look-ahead in \s+(?!\S) only
//           sees the current piece, so "a  1" gives "a", "  ", "1" (not " 1").
//
// Contractions are matched in lower case only ("'S" is "'" then "S"). Categories come
// from llama.cpp's tables (tokenizer_unicode.h), not from RE2 or ICU.
//
// Thread-safety: stateless functions; the scratch buffer belongs to the caller.
#ifndef WEFT_COMMON_TOKENIZER_PRETOKENIZE_H_
#define WEFT_COMMON_TOKENIZER_PRETOKENIZE_H_

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/tokenizer_unicode.h"

namespace weft::tokenizer_internal {

// Reusable per-call memory for PreTokenize (keeps allocations out of the hot loop).
struct PreTokenizeScratch {
  std::vector<uint32_t> cps;
  std::vector<CodepointClass> cls;
  std::vector<uint32_t> offsets;  // byte offset of code point i; offsets[n] = size
};

// Appends the words of `text` to `words`, in order; they are views into `text` and
// concatenate back to it. `text` must satisfy IsCanonicalForTokenizer (callers pass
// CanonicalizeForTokenizer's output otherwise).
void PreTokenize(absl::string_view text, PreTokenizeScratch* scratch,
                 std::vector<absl::string_view>* words);

}  // namespace weft::tokenizer_internal

#endif  // WEFT_COMMON_TOKENIZER_PRETOKENIZE_H_

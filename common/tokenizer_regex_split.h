// PatternPass: the pre-tokenizer regexes llama.cpp runs through std::regex
// (unicode_regex_split_stl), reimplemented as linear-time matchers for the shapes they
// have, so that a long run of one class costs no recursion and no quadratic search.
//
// Accepted pattern shapes (anything else is a programming error, CHECKed at
// construction, since patterns are compiled-in constants):
//   A:  [P?] C+ [$]     e.g. \s?\p{L}+   [\p{P}\$\+<=>\^~\|]+   \s+$
//   B:  C1 C2 ... Ck     e.g. \p{N}   [\r\n]   [0-9][0-9][0-9]
// where each atom is \s, \p{N|L|P|M|S|Lu|Ll|Lt|Lm|Lo}, a literal, or a bracket expression
// of those and of ranges a-b (no negation).
//
// Semantics, as llama.cpp gets them from std::regex (ECMAScript, leftmost match, greedy
// with backtracking; gaps between matches are pieces of their own):
// * A code point above U+007F that is in llama.cpp's whitespace set is seen as U+000B
//   (llama.cpp maps it so: std::regex's \s only knows ASCII).
// * \s is U+0009..U+000D and U+0020 (after that mapping).
// * \p{X} is llama.cpp's category X, except for the mapped whitespace (llama.cpp's
//   "collapsed" text turns every non-ASCII code point into one byte per category and
//   every ASCII one stays itself; \p{Lu} etc. collapse to \p{L}).
// * Literals and ranges compare the (mapped) code point value.
// * `$` is the end of the piece being split.
//
// Thread-safety: immutable after construction.
#ifndef WEFT_COMMON_TOKENIZER_REGEX_SPLIT_H_
#define WEFT_COMMON_TOKENIZER_REGEX_SPLIT_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/tokenizer_pretokenize.h"

namespace weft::tokenizer_internal {

// A set of code points: the union of \s, some categories and literal ranges.
struct CharSet {
  bool space = false;
  uint8_t categories = 0;  // bit c: Category c
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive

  bool Contains(uint32_t cp, CodepointFlags flags) const;
};

class PatternPass : public SplitPass {
 public:
  // `pattern`: the regex text (UTF-8) exactly as llama.cpp's llama-vocab.cpp gives it.
  explicit PatternPass(absl::string_view pattern);

  void Split(const PreTokenizeScratch& s, uint32_t begin, uint32_t end,
             std::vector<uint32_t>* ends) const override;

 private:
  // Length of the match starting at `pos`, or 0; `*resume` is where to try next on 0.
  uint32_t MatchAt(const PreTokenizeScratch& s, uint32_t pos, uint32_t end,
                   uint32_t* resume) const;

  bool repeat_ = false;      // shape A
  bool has_prefix_ = false;  // shape A's optional first atom
  bool anchor_end_ = false;  // shape A's '$'
  CharSet prefix_;
  std::vector<CharSet> atoms_;  // shape A: one (repeated); shape B: k in order
};

}  // namespace weft::tokenizer_internal

#endif  // WEFT_COMMON_TOKENIZER_REGEX_SPLIT_H_

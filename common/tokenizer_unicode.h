// Unicode helpers for the tokenizer, written to behave exactly like llama.cpp's
// src/unicode.cpp where llama.cpp's behaviour is observable in token ids.
//
// * Code point categories (\p{N} \p{L} \p{Z} \p{M} \p{P} \p{S} \p{C}, or undefined) and
//   llama.cpp's whitespace set, from a table generated from llama.cpp's own
//   unicode-data.cpp (tools/refdata/gen_tokenizer_unicode_data.py), so the
//   pre-tokenizers split text where llama.cpp does, not where a newer or older Unicode
//   database would.
// * llama.cpp's lenient UTF-8 decoder: a byte that does not start a sequence it accepts
//   becomes U+FFFD and decoding resumes at the next byte; overlong forms and surrogates
//   are accepted as the code points they spell. Text is re-encoded from those code
//   points before tokenization, so "\xC0\x80" tokenizes as "\x00".
// * GPT-2's byte <-> unicode table used by byte-level BPE vocabularies.
//
// Internal to the tokenizer (namespace tokenizer_internal); exposed for tests.
// Thread-safety: pure functions over immutable tables.
#ifndef WEFT_COMMON_TOKENIZER_UNICODE_H_
#define WEFT_COMMON_TOKENIZER_UNICODE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace weft::tokenizer_internal {

inline constexpr uint32_t kReplacementChar = 0xFFFD;
inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// The classes the GPT-2 pre-tokenizer distinguishes. Every code point belongs to
// exactly one; llama.cpp gives every code point below 0x110000 a non-zero flag set, so
// "other" is everything that is not a letter (\p{L}), number (\p{N}) or whitespace.
enum class CodepointClass : uint8_t {
  kOther = 0,
  kLetter = 1,
  kNumber = 2,
  kWhitespace = 3,
};

// llama.cpp's general categories (exactly one per code point).
enum class Category : uint8_t {
  kUndefined = 0,
  kNumber = 1,       // \p{N}
  kLetter = 2,       // \p{L}
  kSeparator = 3,    // \p{Z}
  kAccentMark = 4,   // \p{M}
  kPunctuation = 5,  // \p{P}
  kSymbol = 6,       // \p{S}
  kControl = 7,      // \p{C}
};

// A code point's category and whitespace bit, packed as the generated table stores them.
struct CodepointFlags {
  uint8_t bits = 0;  // bits 0-2: Category; bit 3: whitespace

  static constexpr uint8_t kWhitespaceBit = 0x08;
  Category category() const { return static_cast<Category>(bits & 0x07); }
  bool whitespace() const { return (bits & kWhitespaceBit) != 0; }
  bool letter() const { return category() == Category::kLetter; }
  bool number() const { return category() == Category::kNumber; }
  bool accent_mark() const { return category() == Category::kAccentMark; }
};

struct CodepointRange {
  uint32_t first;
  uint8_t flags;  // CodepointFlags::bits
};

// Generated table (common/tokenizer_unicode_data.cc): sorted by `first`, starting at 0;
// each range ends where the next one starts, the last at 0x110000.
extern const CodepointRange kCodepointRanges[];
extern const int kNumCodepointRanges;

// Flags of `cp`; code points above kMaxCodepoint are undefined, not whitespace.
CodepointFlags FlagsOf(uint32_t cp);

// The GPT-2 class of `cp`: whitespace first, then letter, number, else other.
CodepointClass ClassOf(uint32_t cp);

// Decodes one code point at s[*pos] (which must be < s.size()) the way llama.cpp's
// unicode_cpt_from_utf8 does, and advances *pos. Lead bytes 0xC0-0xF7 followed by
// enough continuation bytes decode without range checks (overlongs, surrogates, and
// values up to 0x1FFFFF); anything else yields kReplacementChar and advances one byte.
// Values above kMaxCodepoint (llama.cpp aborts on them) also yield kReplacementChar.
uint32_t DecodeCodepoint(absl::string_view s, size_t* pos);

// Appends the UTF-8 encoding of `cp` (<= kMaxCodepoint; surrogates are encoded as
// three bytes, like llama.cpp does).
void AppendUtf8(uint32_t cp, std::string* out);

// True when decoding `s` with DecodeCodepoint and re-encoding every code point gives
// back `s` (true for all well-formed UTF-8 and for encoded surrogates).
bool IsCanonicalForTokenizer(absl::string_view s);

// `s` decoded with DecodeCodepoint and re-encoded: what llama.cpp tokenizes.
std::string CanonicalizeForTokenizer(absl::string_view s);

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68
// bytes to U+0100.. in byte order.
uint32_t ByteToUnicode(uint8_t byte);

// Inverse of ByteToUnicode; -1 for code points not in the table.
int UnicodeToByte(uint32_t cp);

// Appends the UTF-8 of ByteToUnicode(b) for every byte b of `bytes`.
void AppendByteEncoded(absl::string_view bytes, std::string* out);

}  // namespace weft::tokenizer_internal

#endif  // WEFT_COMMON_TOKENIZER_UNICODE_H_

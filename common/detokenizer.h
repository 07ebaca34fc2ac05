// Incremental detokenization: token ids in, valid UTF-8 text out, one token at a time.
//
// A byte-level BPE token can end in the middle of a character ("🤷" is four byte
// tokens in SmolLM2's vocabulary), so the bytes of a token are not always printable on
// their own. Utf8StreamDecoder holds back a trailing sequence that may still become a
// valid character and releases it once complete; bytes that can no longer be part of a
// valid character become U+FFFD at once, one U+FFFD per maximal invalid subpart (the
// WHATWG / Unicode "substitution of maximal subparts" rule). Flush() ends the stream:
// a held-back incomplete sequence becomes one U+FFFD. Everything returned, and the
// concatenation of it, is well-formed UTF-8 (no overlongs, surrogates or values above
// U+10FFFF), and for token bytes that are valid UTF-8 it equals Tokenizer::Decode.
//
// IncrementalDetokenizer feeds Tokenizer::TokenBytes (control tokens such as
// <|im_end|> contribute nothing unless render_special is set) through one decoder.
//
// Ownership: IncrementalDetokenizer borrows the Tokenizer, which must outlive it.
// Thread-safety: not thread-safe (one per generated sequence); the Tokenizer it reads
// may be shared.
#ifndef WEFT_COMMON_DETOKENIZER_H_
#define WEFT_COMMON_DETOKENIZER_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "common/tokenizer.h"

namespace weft {

class Utf8StreamDecoder {
 public:
  // Appends to `out` the text that `bytes` completes.
  void Append(absl::string_view bytes, std::string* out);
  // Appends U+FFFD for a held-back incomplete sequence, if any, and resets.
  void Flush(std::string* out);
  // Bytes held back (0 to 3).
  int num_pending_bytes() const { return num_pending_; }

 private:
  void Byte(unsigned char b, std::string* out);

  char pending_[4] = {};
  int num_pending_ = 0;
  int num_needed_ = 0;  // continuation bytes still expected
  unsigned char lower_ = 0x80;
  unsigned char upper_ = 0xBF;
};

class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer* tokenizer, const DecodeOptions& options = {})
      : tokenizer_(tokenizer), options_(options) {}

  // The text that became complete with `token_id` (often all of its bytes; "" while a
  // character is still incomplete).
  std::string Push(int32_t token_id);
  // Same, appending to `out`.
  void Push(int32_t token_id, std::string* out);
  // End of the sequence: U+FFFD for a trailing incomplete character, else "".
  std::string Flush();
  int num_pending_bytes() const { return decoder_.num_pending_bytes(); }

 private:
  const Tokenizer* tokenizer_;
  DecodeOptions options_;
  Utf8StreamDecoder decoder_;
};

}  // namespace weft

#endif  // WEFT_COMMON_DETOKENIZER_H_

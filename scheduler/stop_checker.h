// StopChecker: builds one sequence's output text incrementally from token bytes and
// matches stop strings across token boundaries, deciding what may be streamed now.
//
// Guarantees on the text it emits (through the `delta` out-parameters):
//   * valid UTF-8 only: bytes of a character split over tokens are held until the
//     character completes; invalid bytes become U+FFFD (one per maximal invalid
//     subpart, as the WHATWG decoder does); a character still incomplete when the
//     stream ends becomes U+FFFD;
//   * never retracted: any tail that could still be the start of a stop string is held
//     back, so no emitted text is ever part of a stop string match;
//   * the stream stops at the first token after which any stop string occurs in the
//     text; the text is truncated at the earliest occurrence at that point: the stop
//     string and everything after it are never emitted.
// Cost: O(new bytes + held bytes × number of stop strings) per token; the held tail is
// shorter than the longest stop string.
//
// Ownership: keeps a pointer to the stop strings (owned by the request, which outlives
// its sequences' checkers). Thread-safety: thread-compatible.
#ifndef WEFT_SCHEDULER_STOP_CHECKER_H_
#define WEFT_SCHEDULER_STOP_CHECKER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace weft {

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or values > U+10FFFF).
bool IsValidUtf8(absl::string_view s);

class StopChecker {
 public:
  // `stop_strings` may be null (no stop strings) and must outlive the checker. Each
  // must be valid non-empty UTF-8 (validated at admission).
  explicit StopChecker(const std::vector<std::string>* stop_strings = nullptr);

  // Appends a token's raw bytes. Appends to `*delta` the text that may be streamed now.
  // Returns true when a stop string matched: `*delta` then ends right before the match
  // and the checker holds nothing more. Must not be called after a match.
  bool Append(absl::string_view bytes, std::string* delta);

  // End of stream without a stop-string match: appends everything still held.
  void Flush(std::string* delta);

  // Bytes held back (for tests and debugging).
  size_t num_held_bytes() const { return held_.size() + utf8_tail_.size(); }

 private:
  // Decodes `bytes` (after any pending incomplete character) into valid UTF-8 appended
  // to `out`, keeping a trailing incomplete character in utf8_tail_.
  void Decode(absl::string_view bytes, std::string* out);
  // Length of the longest suffix of held_ that is a proper prefix of a stop string.
  size_t HoldbackLength() const;

  const std::vector<std::string>* stop_strings_;
  std::string utf8_tail_;  // ≤ 3 bytes of an incomplete character
  std::string held_;       // valid UTF-8 not yet emitted (may start a stop string)
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_STOP_CHECKER_H_

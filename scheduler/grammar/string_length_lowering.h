// LowerStringLengths: rewrites a JSON schema's length-bounded plain strings
// ({"type": "string", "minLength": m, "maxLength": n}) into the equivalent pattern
// ({"type": "string", "pattern": "^[^\"\\\\]{m,n}$"}) before XGrammar compiles it.
//
// Why: XGrammar 0.2.8 lowers minLength/maxLength to a counted repetition of a one-character
// rule; every vocabulary token longer than one character crosses that rule's boundary, so
// its adaptive token mask marks nearly the whole vocabulary "uncertain" and each mask
// inside such a string replays ~all tokens through the Earley parser (1-8 ms per token with
// a 49k vocabulary; XGrammar issue #852, fixed upstream after 0.2.8). A pattern compiles to
// one finite automaton whose states classify tokens at compile time (~10-15 us per token).
// Same language: XGrammar compiles a string's pattern with the JSON-string restriction (no
// '"', '\\' or control character unescaped, grammar_builder.h AddRegex) and its regex
// classes count code points, as maxLength does; its own length lowering excludes only '"',
// '\\', CR and LF (so the rewrite also stops raw control characters, which RFC 8259 forbids).
//
// Only strings XGrammar would lower by repetition are rewritten: "type" exactly "string",
// integer bounds with 0 <= minLength <= maxLength <= kMaxLoweredLength (larger bounds make
// XGrammar's regex a counted repeat again), and no pattern, format, enum or const. Literal
// data ("enum", "const", "default", "examples") is never entered. Text that is not a JSON
// object is returned unchanged (XGrammar reports its error).
// Thread-safety: a pure function.
#ifndef WEFT_SCHEDULER_GRAMMAR_STRING_LENGTH_LOWERING_H_
#define WEFT_SCHEDULER_GRAMMAR_STRING_LENGTH_LOWERING_H_

#include <string>

namespace weft {

// XGrammar's regex unrolls a bounded repetition up to this count (fsm_builder.cc
// kLargeRepeatThreshold) and makes larger ones a counted repeat edge.
inline constexpr int kMaxLoweredLength = 128;

struct LoweredSchema {
  std::string schema;     // the schema to compile
  int num_lowered = 0;    // strings rewritten
};

LoweredSchema LowerStringLengths(const std::string& schema);

}  // namespace weft

#endif  // WEFT_SCHEDULER_GRAMMAR_STRING_LENGTH_LOWERING_H_

// LowerStringLengths / ExpandBoundedStrings: JSON-schema strings with a small length bound
// ({"type": "string", "minLength": m, "maxLength": n}, n <= kMaxLoweredLength) compiled as
// one finite automaton that accepts exactly what JSON allows, counted as JSON Schema counts.
//
// Why: XGrammar 0.2.8 lowers minLength/maxLength to a counted repetition of a one-character
// rule; every vocabulary token longer than one character crosses that rule's boundary, so
// its adaptive token mask marks nearly the whole vocabulary "uncertain" and each mask
// inside such a string replays ~all tokens through the Earley parser (1-8 ms per token with
// a 49k vocabulary; XGrammar issue #852, fixed upstream after 0.2.8). A regex compiles to
// one finite automaton whose states classify tokens at compile time (~10-20 us per token).
//
// Two steps, because a schema "pattern" cannot express escapes in XGrammar: it compiles a
// pattern with json_string=true, which removes '"', '\\' and U+0000-U+001F from every edge
// (grammar_functor.cc JSONStringForbiddenChars), so a pattern can never emit "\\n".
//   1. LowerStringLengths rewrites each such string into a marker pattern
//      "^(weft){0}[^\"\\\\]{m,n}$" (its own language, if it ever survived step 2, is the
//      escape-free subset: safe). The prefix "(weft){0}" matches the empty string; no schema
//      writes it, so a schema's own pattern is never mistaken for a marker.
//   2. ExpandBoundedStrings takes XGrammar's EBNF of the converted schema
//      (Grammar::FromJSONSchema(...).ToString()) and replaces each marker's
//      Regex("...", json_string=true) with Regex(BoundedStringRegex(m, n)) (json_string
//      false: the regex itself says what a JSON string body is).
//
// The language (RFC 8259 section 7; JSON Schema's length = characters of the decoded string):
// a character is an unescaped code point other than '"', '\\' and U+0000-U+001F, or one of
// the escapes \" \\ \/ \b \f \n \r \t \uXXXX (hex digits of either case). Each counts as
// one character; a surrogate pair \uD8xx-\uDBxx followed by \uDCxx-\uDFxx is one character
// (it decodes to one code point: Python's len() and the jsonschema package count it as 1).
// A lone surrogate escape is refused (RFC 8259 section 8.2: its meaning is unpredictable).
//
// Only strings XGrammar would lower by repetition are rewritten: "type" exactly "string",
// integer bounds with 0 <= minLength <= maxLength <= kMaxLoweredLength (larger bounds make
// XGrammar's regex a counted repeat again), and no pattern, format, enum or const. Literal
// data ("enum", "const", "default", "examples") is never entered. Text that is not a JSON
// object is returned unchanged (XGrammar reports its error).
// Thread-safety: pure functions.
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

// Marks every bounded string of `schema` (step 1).
LoweredSchema LowerStringLengths(const std::string& schema);

// Step 1 for the schemas of a structural tag (tool calls): every format
// {"type": "json_schema", "json_schema": {...}} has its schema's bounded strings marked
// (a schema given as a JSON string is left to XGrammar's own lowering).
LoweredSchema LowerStructuralTagStrings(const std::string& tag);

// The pattern step 1 writes for bounds [min, max].
std::string BoundedStringMarker(int min, int max);

// The JSON-string-body regex (XGrammar's regex dialect) of 'min' to 'max' characters.
std::string BoundedStringRegex(int min, int max);

// `ebnf` (XGrammar's printed grammar) with every marker's Regex(...) replaced (step 2).
// `num_expanded` (optional) receives the count.
std::string ExpandBoundedStrings(const std::string& ebnf, int* num_expanded = nullptr);

}  // namespace weft

#endif  // WEFT_SCHEDULER_GRAMMAR_STRING_LENGTH_LOWERING_H_

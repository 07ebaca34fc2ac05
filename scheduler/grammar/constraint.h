// GrammarConstraint: what a request's output must match (structured output), as the
// request contract carries it — plain data, no grammar engine. One of:
//   kJsonSchema  `source` is a JSON Schema (a JSON text); the output is one JSON value
//                valid against it (XGrammar's strict mode: no properties beyond those
//                listed unless the schema allows them).
//   kJsonObject  any JSON object (OpenAI's response_format json_object); no source.
//   kRegex       `source` is a regular expression the whole output matches.
//   kEbnf        `source` is an EBNF/GBNF grammar (XGrammar's dialect, root rule "root").
//   kChoice      the output is exactly one of `choices` (non-empty strings).
//   kStructuralTag `source` is an XGrammar structural tag (JSON text): tagged regions
//                such as tool calls, each with its own schema (openai_tools.h builds them).
// CheckConstraint is the one validator of its size (the limits below); whether the
// source compiles is known only to the grammar engine (grammar_compiler.h), which refuses
// it with INVALID_ARGUMENT naming the reason. CacheKey() identifies a compiled grammar.
// Thread-safety: value types and pure functions.
#ifndef WEFT_SCHEDULER_GRAMMAR_CONSTRAINT_H_
#define WEFT_SCHEDULER_GRAMMAR_CONSTRAINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/field_error.h"

namespace weft {

struct GrammarConstraint {
  enum class Kind : uint8_t { kJsonSchema, kJsonObject, kRegex, kEbnf, kChoice, kStructuralTag };

  Kind kind = Kind::kJsonObject;
  std::string source;                // kJsonSchema, kRegex, kEbnf, kStructuralTag
  std::vector<std::string> choices;  // kChoice
  // The request field a refusal names ("" = "constraint.<kind>"): "chat.tools" for the
  // structural tag an edge builds from chat.tool_choice and chat.tools. Not part of the
  // grammar: CacheKey() and == ignore it.
  std::string request_field;

  // A 64-bit hash of (kind, source, choices): equal constraints have equal keys.
  uint64_t CacheKey() const;
  friend bool operator==(const GrammarConstraint& a, const GrammarConstraint& b) {
    return a.kind == b.kind && a.source == b.source && a.choices == b.choices;
  }
};

const char* ConstraintKindName(GrammarConstraint::Kind kind);

// Whether `c` is a tool-call grammar: a structural tag (the one kind tool calls are
// generated under, generate_request.cc). Such a grammar lets the model's tool-call marker
// tokens match their text (grammar_engine.h) and its sequence's text includes them
// (TokenTextSource::ToolCallBytes); no other constraint does either.
inline bool IsToolCallGrammar(const GrammarConstraint& c) {
  return c.kind == GrammarConstraint::Kind::kStructuralTag;
}

// Bounds on what a request may ask for before any compile work is spent on it.
struct ConstraintLimits {
  int32_t max_source_bytes = 64 * 1024;  // a schema, regex or grammar text
  int32_t max_choices = 256;
  int32_t max_choice_bytes = 1024;       // each choice
  int32_t max_json_depth = 32;           // nesting of a JSON schema's objects/arrays
};

// The size rule for a constraint: the source non-empty (JSON schema, regex, EBNF) and at
// most max_source_bytes, valid UTF-8; a JSON schema or structural tag nested at most max_json_depth deep
// (brackets counted outside strings); 1..max_choices non-empty choices of at most
// max_choice_bytes each. The error's field is relative to the constraint ("json_schema",
// "regex", "grammar", "choice", "structural_tag"); request_spec.cc prefixes it.
std::optional<FieldError> CheckConstraint(const GrammarConstraint& c, const ConstraintLimits& lim);

}  // namespace weft

#endif  // WEFT_SCHEDULER_GRAMMAR_CONSTRAINT_H_

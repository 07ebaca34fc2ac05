#include "scheduler/grammar/constraint.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "scheduler/stop_checker.h"

namespace weft {
namespace {

// FNV-1a over bytes, with each part's length mixed in so that ("ab","c") != ("a","bc").
class Fnv {
 public:
  void Add(absl::string_view s) {
    AddWord(s.size());
    for (unsigned char c : s) Byte(c);
  }
  void AddWord(uint64_t v) {
    for (int i = 0; i < 8; ++i) Byte(static_cast<unsigned char>(v >> (8 * i)));
  }
  uint64_t value() const { return h_; }

 private:
  void Byte(unsigned char c) {
    h_ ^= c;
    h_ *= 0x100000001b3ULL;
  }
  uint64_t h_ = 0xcbf29ce484222325ULL;
};

// Nesting depth of '{' / '[' outside JSON strings (the text need not be valid JSON: the
// engine's parser says why it is not).
int32_t JsonDepth(absl::string_view s) {
  int32_t depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return max_depth;
}

const char* SourceField(GrammarConstraint::Kind kind) {
  switch (kind) {
    case GrammarConstraint::Kind::kJsonSchema: return "json_schema";
    case GrammarConstraint::Kind::kRegex: return "regex";
    case GrammarConstraint::Kind::kEbnf: return "grammar";
    case GrammarConstraint::Kind::kStructuralTag: return "structural_tag";
    default: return "";
  }
}

}  // namespace

const char* ConstraintKindName(GrammarConstraint::Kind kind) {
  switch (kind) {
    case GrammarConstraint::Kind::kJsonSchema: return "json_schema";
    case GrammarConstraint::Kind::kJsonObject: return "json_object";
    case GrammarConstraint::Kind::kRegex: return "regex";
    case GrammarConstraint::Kind::kEbnf: return "grammar";
    case GrammarConstraint::Kind::kChoice: return "choice";
    case GrammarConstraint::Kind::kStructuralTag: return "structural_tag";
  }
  return "?";
}

uint64_t GrammarConstraint::CacheKey() const {
  Fnv h;
  h.AddWord(static_cast<uint64_t>(kind));
  h.Add(source);
  h.AddWord(choices.size());
  for (const std::string& c : choices) h.Add(c);
  return h.value();
}

std::optional<FieldError> CheckConstraint(const GrammarConstraint& c, const ConstraintLimits& lim) {
  using Kind = GrammarConstraint::Kind;
  if (c.kind == Kind::kJsonObject) {
    if (!c.source.empty() || !c.choices.empty()) {
      return FieldError{"json_object", "takes no source"};
    }
    return std::nullopt;
  }
  if (c.kind == Kind::kChoice) {
    if (c.choices.empty()) return FieldError{"choice", "needs at least one choice"};
    if (c.choices.size() > static_cast<size_t>(lim.max_choices)) {
      return FieldError{"choice", absl::StrCat("at most ", lim.max_choices, " choices")};
    }
    for (size_t i = 0; i < c.choices.size(); ++i) {
      const std::string& s = c.choices[i];
      const std::string field = absl::StrCat("choice[", i, "]");
      if (s.empty()) return FieldError{field, "empty choice"};
      if (s.size() > static_cast<size_t>(lim.max_choice_bytes)) {
        return FieldError{field, absl::StrCat("over ", lim.max_choice_bytes, " bytes")};
      }
      if (!IsValidUtf8(s)) return FieldError{field, "not valid UTF-8"};
    }
    return std::nullopt;
  }
  const std::string field = SourceField(c.kind);
  if (c.source.empty()) return FieldError{field, "empty"};
  if (c.source.size() > static_cast<size_t>(lim.max_source_bytes)) {
    return FieldError{field, absl::StrCat(c.source.size(), " bytes is over the limit of ",
                                          lim.max_source_bytes)};
  }
  if (!IsValidUtf8(c.source)) return FieldError{field, "not valid UTF-8"};
  if (c.kind == Kind::kJsonSchema || c.kind == Kind::kStructuralTag) {
    const int32_t depth = JsonDepth(c.source);
    if (depth > lim.max_json_depth) {
      return FieldError{field, absl::StrCat("nested ", depth, " deep; the limit is ",
                                            lim.max_json_depth)};
    }
  }
  return std::nullopt;
}

}  // namespace weft

#include "scheduler/grammar/string_length_lowering.h"

#include <cctype>
#include <cstdint>
#include <string>

#include "nlohmann/json.hpp"

namespace weft {
namespace {

// ordered_json: a schema's property order is the order XGrammar generates them in.
using Json = nlohmann::ordered_json;

// The bound under `key`: -1 absent; -2 present but not a usable integer.
int64_t Bound(const Json& node, const char* key) {
  auto it = node.find(key);
  if (it == node.end()) return -1;
  if (!it->is_number_integer()) return -2;
  const int64_t v = it->get<int64_t>();
  return v < 0 ? -2 : v;
}

bool Lower(Json& node) {
  if (!node.is_object()) return false;
  auto type = node.find("type");
  if (type == node.end() || !type->is_string() || *type != "string") return false;
  for (const char* k : {"pattern", "format", "enum", "const"}) {
    if (node.contains(k)) return false;
  }
  const int64_t lo = Bound(node, "minLength");
  const int64_t hi = Bound(node, "maxLength");
  if (lo == -2 || hi == -2 || (lo == -1 && hi == -1)) return false;
  const int64_t min = lo < 0 ? 0 : lo;
  if (hi < 0 || min > hi || hi > kMaxLoweredLength) return false;
  node.erase("minLength");
  node.erase("maxLength");
  node["pattern"] = BoundedStringMarker(static_cast<int>(min), static_cast<int>(hi));
  return true;
}

// Every subschema below `node` (depth is bounded by CheckConstraint's max_json_depth).
void Walk(Json& node, int* count) {
  if (node.is_array()) {
    for (Json& v : node) Walk(v, count);
    return;
  }
  if (!node.is_object()) return;
  if (Lower(node)) ++*count;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string& key = it.key();
    if (key == "enum" || key == "const" || key == "default" || key == "examples") continue;
    Walk(it.value(), count);
  }
}

// The marker as XGrammar's printer writes it (EscapeString: '"' and '\\' backslashed), up to
// the minimum; then "m,n}$\", json_string=true)".
constexpr char kPrintedMarkerHead[] = R"(Regex("^(weft){0}[^\"\\\\]{)";
constexpr char kPrintedMarkerTail[] = R"(}$", json_string=true))";

// Reads a decimal count at `pos` (at most 3 digits: bounds are <= kMaxLoweredLength).
bool ReadCount(const std::string& s, size_t* pos, int* value) {
  size_t p = *pos;
  int v = 0;
  while (p < s.size() && p - *pos < 4 && std::isdigit(static_cast<unsigned char>(s[p]))) {
    v = v * 10 + (s[p++] - '0');
  }
  if (p == *pos || p - *pos > 3) return false;
  *pos = p;
  *value = v;
  return true;
}

// An EBNF string literal of `s` (XGrammar's parser: backslash escapes '"' and '\\').
std::string EbnfString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Every {"type": "json_schema", "json_schema": {...}} format below `node` (a structural
// tag's nesting is bounded by CheckConstraint's max_json_depth): its schema is walked.
void WalkTag(Json& node, int* count) {
  if (node.is_array()) {
    for (Json& v : node) WalkTag(v, count);
    return;
  }
  if (!node.is_object()) return;
  auto type = node.find("type");
  auto schema = node.find("json_schema");
  if (type != node.end() && *type == "json_schema" && schema != node.end() &&
      schema->is_object()) {
    Walk(*schema, count);
    return;
  }
  for (auto it = node.begin(); it != node.end(); ++it) WalkTag(it.value(), count);
}

}  // namespace

std::string BoundedStringMarker(int min, int max) {
  return "^(weft){0}[^\"\\\\]{" + std::to_string(min) + "," + std::to_string(max) + "}$";
}

std::string BoundedStringRegex(int min, int max) {
  // One character of a JSON string body: an unescaped code point, a one-letter escape, a
  // \uXXXX that is not a surrogate, or a high-low surrogate pair (one code point).
  static const std::string kHex = "[0-9a-fA-F]";
  static const std::string kChar =
      "([^\"\\\\\\x00-\\x1f]|\\\\([\"\\\\/bfnrt]|u([0-9a-cA-Ce-fE-F]" + kHex + "{3}|[dD][0-7]" +
      kHex + "{2}|[dD][89abAB]" + kHex + "{2}\\\\u[dD][c-fC-F]" + kHex + "{2})))";
  return "^" + kChar + "{" + std::to_string(min) + "," + std::to_string(max) + "}$";
}

std::string ExpandBoundedStrings(const std::string& ebnf, int* num_expanded) {
  std::string out;
  int count = 0;
  size_t from = 0;
  const size_t head_len = sizeof(kPrintedMarkerHead) - 1;
  const size_t tail_len = sizeof(kPrintedMarkerTail) - 1;
  for (size_t at = ebnf.find(kPrintedMarkerHead); at != std::string::npos;
       at = ebnf.find(kPrintedMarkerHead, at + 1)) {
    size_t p = at + head_len;
    int min = 0, max = 0;
    if (!ReadCount(ebnf, &p, &min) || p >= ebnf.size() || ebnf[p++] != ',' ||
        !ReadCount(ebnf, &p, &max) || ebnf.compare(p, tail_len, kPrintedMarkerTail) != 0) {
      continue;  // not a marker: left as XGrammar printed it
    }
    out.append(ebnf, from, at - from);
    out += "Regex(" + EbnfString(BoundedStringRegex(min, max)) + ")";
    from = p + tail_len;
    ++count;
  }
  out.append(ebnf, from, std::string::npos);
  if (num_expanded != nullptr) *num_expanded = count;
  return out;
}

namespace {

// `text` parsed, walked by `walk` and printed again when it rewrote anything; text that is
// not a JSON object comes back unchanged.
LoweredSchema Lowered(const std::string& text, void (*walk)(Json&, int*)) {
  LoweredSchema out;
  Json root = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!root.is_object()) {
    out.schema = text;
    return out;
  }
  walk(root, &out.num_lowered);
  out.schema = out.num_lowered > 0
                   ? root.dump(-1, ' ', false, Json::error_handler_t::replace)
                   : text;
  return out;
}

}  // namespace

LoweredSchema LowerStructuralTagStrings(const std::string& tag) { return Lowered(tag, WalkTag); }

LoweredSchema LowerStringLengths(const std::string& schema) { return Lowered(schema, Walk); }

}  // namespace weft

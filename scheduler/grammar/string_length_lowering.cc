#include "scheduler/grammar/string_length_lowering.h"

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
  node["pattern"] = "^[^\"\\\\]{" + std::to_string(min) + "," + std::to_string(hi) + "}$";
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

}  // namespace

LoweredSchema LowerStringLengths(const std::string& schema) {
  LoweredSchema out;
  Json root = Json::parse(schema, nullptr, /*allow_exceptions=*/false);
  if (!root.is_object()) {
    out.schema = schema;
    return out;
  }
  Walk(root, &out.num_lowered);
  out.schema = out.num_lowered > 0
                   ? root.dump(-1, ' ', false, Json::error_handler_t::replace)
                   : schema;
  return out;
}

}  // namespace weft

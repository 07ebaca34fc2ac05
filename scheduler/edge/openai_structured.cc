#include "scheduler/edge/openai_structured.h"

#include <string>

#include "common/field_error.h"
#include "scheduler/edge/openai_json.h"

namespace weft::openai {
namespace {

absl::Status Invalid(const std::string& field, const std::string& why) {
  return FieldErrorStatus(kBodyFieldSchema, FieldError{field, why});
}

const nlohmann::ordered_json* Member(const nlohmann::ordered_json& o, const char* name) {
  if (!o.is_object()) return nullptr;
  auto it = o.find(name);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace

absl::Status ParseResponseFormat(const nlohmann::ordered_json& body, weft::v1::GenerateRequest* request) {
  const nlohmann::ordered_json* v = Member(body, "response_format");
  if (v == nullptr) return absl::OkStatus();
  const nlohmann::ordered_json* type = Member(*v, "type");
  if (type == nullptr || !type->is_string()) {
    return Invalid("response_format.type", "must be \"text\", \"json_object\" or \"json_schema\"");
  }
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "text") return absl::OkStatus();
  if (t == "json_object") {
    request->mutable_constraint()->mutable_json_object();
    return absl::OkStatus();
  }
  if (t != "json_schema") {
    return Invalid("response_format.type", "must be \"text\", \"json_object\" or \"json_schema\"");
  }
  const nlohmann::ordered_json* js = Member(*v, "json_schema");
  if (js == nullptr || !js->is_object()) {
    return Invalid("response_format.json_schema", "must be an object with a \"schema\"");
  }
  const nlohmann::ordered_json* name = Member(*js, "name");
  if (name != nullptr && !name->is_string()) {
    return Invalid("response_format.json_schema.name", "must be a string");
  }
  const nlohmann::ordered_json* strict = Member(*js, "strict");
  if (strict != nullptr && !strict->is_boolean()) {
    return Invalid("response_format.json_schema.strict", "must be a boolean");
  }
  const nlohmann::ordered_json* schema = Member(*js, "schema");
  if (schema == nullptr || !(schema->is_object() || schema->is_boolean())) {
    return Invalid("response_format.json_schema.schema", "must be a JSON Schema object");
  }
  request->mutable_constraint()->set_json_schema(schema->dump());
  return absl::OkStatus();
}

}  // namespace weft::openai

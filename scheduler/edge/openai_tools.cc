#include "scheduler/edge/openai_tools.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/chat_tools.h"
#include "common/field_error.h"
#include "scheduler/edge/openai_json.h"

namespace weft::openai {
namespace {

using Json = nlohmann::ordered_json;

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return FieldErrorStatus(kBodyFieldSchema, FieldError{std::string(field), std::string(why)});
}

const Json* Member(const Json& o, const char* name) {
  if (!o.is_object()) return nullptr;
  auto it = o.find(name);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

constexpr char kNameRule[] = "1 to 64 characters of A-Z a-z 0-9 _ -";

absl::Status ParseTool(const Json& t, size_t i, weft::v1::Tool* out) {
  const std::string at = absl::StrCat("tools[", i, "]");
  if (!t.is_object()) return Invalid(at, "must be an object");
  const Json* type = Member(t, "type");
  if (type == nullptr || *type != "function") {
    return Invalid(absl::StrCat(at, ".type"), "only \"function\" tools are supported");
  }
  const Json* f = Member(t, "function");
  if (f == nullptr || !f->is_object()) {
    return Invalid(absl::StrCat(at, ".function"), "must be an object with a \"name\"");
  }
  const Json* name = Member(*f, "name");
  if (name == nullptr || !name->is_string() || !IsValidToolName(name->get_ref<const std::string&>())) {
    return Invalid(absl::StrCat(at, ".function.name"), kNameRule);
  }
  out->set_name(name->get<std::string>());
  if (const Json* d = Member(*f, "description")) {
    if (!d->is_string()) return Invalid(absl::StrCat(at, ".function.description"), "must be a string");
    out->set_description(d->get<std::string>());
  }
  if (const Json* p = Member(*f, "parameters")) {
    if (!p->is_object()) {
      return Invalid(absl::StrCat(at, ".function.parameters"), "must be a JSON Schema object");
    }
    if (const Json* pt = Member(*p, "type"); pt != nullptr && !(pt->is_string() || pt->is_array())) {
      return Invalid(absl::StrCat(at, ".function.parameters.type"),
                     "must be a type name or a list of them");
    }
    out->set_parameters(Dump(*p));
  }
  if (const Json* s = Member(*f, "strict"); s != nullptr && !s->is_boolean()) {
    return Invalid(absl::StrCat(at, ".function.strict"), "must be a boolean");
  }
  return absl::OkStatus();
}

enum class Choice { kNone, kAuto, kRequired, kNamed };

absl::Status ParseChoice(const Json& body, const weft::v1::ChatPrompt& chat, Choice* choice,
                         std::string* named) {
  const Json* v = Member(body, "tool_choice");
  *choice = chat.tools().empty() ? Choice::kNone : Choice::kAuto;
  if (v == nullptr) return absl::OkStatus();
  if (v->is_string()) {
    const std::string& s = v->get_ref<const std::string&>();
    if (s == "none") {
      *choice = Choice::kNone;
    } else if (s == "auto" || s == "required") {
      if (chat.tools().empty()) return Invalid("tool_choice", absl::StrCat("\"", s, "\" needs tools"));
      *choice = s == "auto" ? Choice::kAuto : Choice::kRequired;
    } else {
      return Invalid("tool_choice", "must be \"none\", \"auto\", \"required\" or a function");
    }
    return absl::OkStatus();
  }
  const Json* type = Member(*v, "type");
  if (type == nullptr || *type != "function") {
    return Invalid("tool_choice.type", "only {\"type\": \"function\", ...} is supported");
  }
  const Json* f = Member(*v, "function");
  const Json* name = f == nullptr ? nullptr : Member(*f, "name");
  if (name == nullptr || !name->is_string()) {
    return Invalid("tool_choice.function.name", "must name one of the tools");
  }
  *named = name->get<std::string>();
  for (const auto& t : chat.tools()) {
    if (t.name() == *named) {
      *choice = Choice::kNamed;
      return absl::OkStatus();
    }
  }
  return Invalid("tool_choice.function.name",
                 absl::StrCat("no tool named '", named->substr(0, 64), "' in tools"));
}

}  // namespace

absl::Status ParseTools(const Json& body, weft::v1::GenerateRequest* request, bool* parse_calls) {
  *parse_calls = false;
  if (const Json* f = Member(body, "functions"); f != nullptr && !f->empty()) {
    return Invalid("functions", "the deprecated functions API is not supported: use tools");
  }
  if (Member(body, "function_call") != nullptr) {
    return Invalid("function_call", "the deprecated functions API is not supported: use tool_choice");
  }
  weft::v1::ChatPrompt* chat = request->mutable_chat();
  if (const Json* tools = Member(body, "tools")) {
    if (!tools->is_array()) return Invalid("tools", "must be a list of tools");
    if (tools->size() > static_cast<size_t>(kMaxTools)) {
      return Invalid("tools", absl::StrCat("at most ", kMaxTools, " tools"));
    }
    for (size_t i = 0; i < tools->size(); ++i) {
      weft::v1::Tool* t = chat->add_tools();
      if (absl::Status s = ParseTool((*tools)[i], i, t); !s.ok()) return s;
      for (int j = 0; j + 1 < chat->tools_size(); ++j) {
        if (chat->tools(j).name() == t->name()) {
          return Invalid(absl::StrCat("tools[", i, "].function.name"),
                         absl::StrCat("'", t->name(), "' is defined twice"));
        }
      }
    }
  }
  if (const Json* p = Member(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) return Invalid("parallel_tool_calls", "must be true or false");
    chat->set_parallel_tool_calls(p->get<bool>());
  }
  Choice choice;
  std::string named;
  if (absl::Status s = ParseChoice(body, *chat, &choice, &named); !s.ok()) return s;
  weft::v1::ToolChoice* tc = chat->mutable_tool_choice();
  switch (choice) {
    case Choice::kNone: tc->set_mode(weft::v1::ToolChoice::MODE_NONE); return absl::OkStatus();
    case Choice::kAuto: tc->set_mode(weft::v1::ToolChoice::MODE_AUTO); break;
    case Choice::kRequired: tc->set_mode(weft::v1::ToolChoice::MODE_REQUIRED); break;
    case Choice::kNamed: tc->set_function(named); break;
  }
  if (request->has_constraint()) {
    return Invalid("response_format",
                   "cannot be combined with tools unless tool_choice is \"none\"");
  }
  *parse_calls = true;
  return absl::OkStatus();
}

absl::Status ParseMessageToolFields(const Json& m, absl::string_view at, weft::v1::ChatMessage* out) {
  const std::string role = out->role();
  if (const Json* id = Member(m, "tool_call_id")) {
    if (role != "tool") return Invalid(absl::StrCat(at, ".tool_call_id"), "only a tool message has one");
    if (!id->is_string()) return Invalid(absl::StrCat(at, ".tool_call_id"), "must be a string");
    out->set_tool_call_id(id->get<std::string>());
  }
  const Json* calls = Member(m, "tool_calls");
  if (calls == nullptr || (calls->is_array() && calls->empty())) return absl::OkStatus();
  if (role != "assistant") {
    return Invalid(absl::StrCat(at, ".tool_calls"), "only an assistant message has tool calls");
  }
  if (!calls->is_array()) return Invalid(absl::StrCat(at, ".tool_calls"), "must be a list");
  for (size_t j = 0; j < calls->size(); ++j) {
    const Json& c = (*calls)[j];
    const std::string cat = absl::StrCat(at, ".tool_calls[", j, "]");
    const Json* type = Member(c, "type");
    if (type != nullptr && *type != "function") {
      return Invalid(absl::StrCat(cat, ".type"), "only \"function\" calls are supported");
    }
    const Json* f = Member(c, "function");
    const Json* name = f == nullptr ? nullptr : Member(*f, "name");
    if (name == nullptr || !name->is_string() || !IsValidToolName(name->get_ref<const std::string&>())) {
      return Invalid(absl::StrCat(cat, ".function.name"), kNameRule);
    }
    weft::v1::ToolCall* out_call = out->add_tool_calls();
    out_call->set_name(name->get<std::string>());
    if (const Json* id = Member(c, "id")) {
      if (!id->is_string()) return Invalid(absl::StrCat(cat, ".id"), "must be a string");
      out_call->set_id(id->get<std::string>());
    }
    if (const Json* args = Member(*f, "arguments")) {
      // OpenAI sends a JSON text; an object is taken as its text.
      out_call->set_arguments(args->is_string() ? args->get<std::string>() : Dump(*args));
    }
  }
  return absl::OkStatus();
}

}  // namespace weft::openai

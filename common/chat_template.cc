#include "common/chat_template.h"

#include <exception>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/chat_template_claims.h"
#include "jinja/caps.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "jinja/runtime.h"
#include "jinja/value.h"
#include "json.h"

// llama.cpp's engine reports errors by throwing; this file is compiled with -fexceptions
// and every call into the engine is caught here, so nothing escapes Parse or Render.

namespace weft {

struct ChatTemplate::Impl {
  std::string source;
  std::string bos_token;
  std::string eos_token;
  jinja::program program;
  const KnownChatTemplateDifference* known_difference = nullptr;
  bool renders_tools = false;
  bool object_arguments = false;
  bool system_role = true;
  ToolCallFormat tool_call_format = ToolCallFormat::kHermes;
};

namespace {

constexpr size_t kMaxRoleBytes = 32;

absl::Status CheckRole(absl::string_view role, size_t index) {
  bool ok = !role.empty() && role.size() <= kMaxRoleBytes;
  for (char c : role) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '-');
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("messages[", index, "].role: 1 to ", kMaxRoleBytes,
                   " characters of A-Z a-z 0-9 _ - (the template writes it as markup)"));
}

jinja::value InputString(const std::string& s) {
  auto v = jinja::mk_val<jinja::value_string>(s);
  v->mark_input();
  return v;
}

// A JSON value as a Jinja value, its strings marked as request input. Throws on bad JSON.
jinja::value InputJson(const common_json& j) {
  jinja::context scratch;
  common_json holder = common_json::object();
  holder["v"] = j;
  jinja::global_from_json(scratch, holder, /*mark_input=*/true);
  return scratch.get_val("v");
}

// OpenAI's shape of an assistant turn's calls. Arguments that are a JSON object are
// given as one where the template reads them as an object (object_arguments).
jinja::value ToolCalls(const std::vector<ChatToolCall>& calls, bool object_arguments) {
  common_json list = common_json::array();
  for (const ChatToolCall& c : calls) {
    common_json function = common_json::object();
    function["name"] = c.name;
    function["arguments"] = c.arguments;
    if (object_arguments) {
      common_json parsed = common_json::parse_no_throw(c.arguments);
      if (!parsed.is_discarded() && parsed.is_object()) function["arguments"] = parsed;
    }
    common_json call = common_json::object();
    call["id"] = c.id;
    call["type"] = "function";
    call["function"] = function;
    list.push_back(call);
  }
  return InputJson(list);
}

jinja::value Messages(absl::Span<const ChatMessage> messages, bool object_arguments) {
  auto list = jinja::mk_val<jinja::value_array>();
  for (const ChatMessage& m : messages) {
    auto obj = jinja::mk_val<jinja::value_object>();
    obj->insert("role", jinja::mk_val<jinja::value_string>(m.role));
    obj->insert("content", InputString(m.content));
    if (!m.tool_calls.empty()) obj->insert("tool_calls", ToolCalls(m.tool_calls, object_arguments));
    if (!m.tool_call_id.empty()) obj->insert("tool_call_id", InputString(m.tool_call_id));
    list->push_back(obj);
  }
  return list;
}

bool HasToolTurns(absl::Span<const ChatMessage> messages) {
  for (const ChatMessage& m : messages) {
    if (!m.tool_calls.empty() || m.role == "tool") return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(absl::string_view source, std::string bos_token,
                                                 std::string eos_token,
                                                 const ChatTemplateParseOptions& options) {
  auto impl = std::make_shared<Impl>();
  if (options.refuse_known_differences) {
    impl->known_difference = FindKnownChatTemplateDifference(source);
  }
  impl->bos_token = std::move(bos_token);
  impl->eos_token = std::move(eos_token);
  try {
    jinja::lexer lexer;
    const jinja::lexer_result tokens = lexer.tokenize(std::string(source));
    impl->program = jinja::parse_from_tokens(tokens);
    impl->source = tokens.source;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template could not be parsed: ", e.what()));
  }
  try {
    // llama.cpp's probe renders sample conversations and records what the template read;
    // a template it cannot probe gets the fallback.
    const jinja::caps caps = jinja::caps_get(impl->program);
    impl->renders_tools = caps.supports_tools && caps.supports_tool_calls;
    impl->object_arguments = caps.supports_object_arguments;
    impl->system_role = caps.supports_system_role;
  } catch (const std::exception&) {
    impl->renders_tools = false;
  }
  impl->tool_call_format = DetectToolCallFormat(impl->source, impl->renders_tools);
  return ChatTemplate(std::move(impl));
}

const std::string& ChatTemplate::source() const { return impl_->source; }
bool ChatTemplate::renders_tools() const { return impl_->renders_tools; }
ToolCallFormat ChatTemplate::tool_call_format() const { return impl_->tool_call_format; }

absl::StatusOr<RenderedChat> ChatTemplate::Render(absl::Span<const ChatMessage> messages,
                                                  const ChatRenderOptions& options) const {
  for (size_t i = 0; i < messages.size(); ++i) {
    if (absl::Status s = CheckRole(messages[i].role, i); !s.ok()) return s;
  }
  if (options.tools_fallback && !impl_->renders_tools &&
      (!options.tools_json.empty() || HasToolTurns(messages))) {
    auto hermes = HermesToolMessages(messages, options.tools_json, impl_->system_role);
    if (!hermes.ok()) return hermes.status();
    ChatRenderOptions plain = options;
    plain.tools_json.clear();
    plain.tools_fallback = false;
    return Render(*hermes, plain);
  }
  if (const KnownChatTemplateDifference* k = impl_->known_difference;
      k != nullptr && (!k->only_with_tools || !options.tools_json.empty())) {
    return absl::UnimplementedError(absl::StrCat(
        "this chat template does not render as Hugging Face's Jinja2 does",
        k->only_with_tools ? " with tools" : "", ": ", k->reason));
  }
  RenderedChat out;
  try {
    jinja::context ctx(impl_->source);
    ctx.current_time = options.now.value_or(std::time(nullptr));
    ctx.set_val("messages", Messages(messages, impl_->object_arguments));
    ctx.set_val("bos_token", jinja::mk_val<jinja::value_string>(impl_->bos_token));
    ctx.set_val("eos_token", jinja::mk_val<jinja::value_string>(impl_->eos_token));
    ctx.set_val("add_generation_prompt",
                jinja::mk_val<jinja::value_bool>(options.add_generation_prompt));
    ctx.set_val("tools", jinja::mk_val<jinja::value_none>());
    ctx.set_val("documents", jinja::mk_val<jinja::value_none>());
    if (!options.tools_json.empty()) {
      absl::Status bad_json;
      try {
        const common_json tools =
            common_json::parse(absl::StrCat("{\"tools\": ", options.tools_json, "}"));
        jinja::global_from_json(ctx, tools, /*mark_input=*/true);
      } catch (const std::exception& e) {
        bad_json = absl::InvalidArgumentError(absl::StrCat("tools: not valid JSON: ", e.what()));
      }
      if (!bad_json.ok()) return bad_json;
    }
    jinja::runtime runtime(ctx);
    const jinja::value results = runtime.execute(impl_->program);
    const jinja::value_string parts = jinja::runtime::gather_string_parts(results);
    for (const jinja::string_part& part : parts->val_str.parts) {
      if (part.is_input && !part.val.empty()) {
        out.literal_spans.emplace_back(out.text.size(), out.text.size() + part.val.size());
      }
      out.text += part.val;
    }
  } catch (const jinja::raised_exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("chat template: ", e.what()));
  } catch (const jinja::not_implemented_exception& e) {
    return absl::UnimplementedError(
        absl::StrCat("chat template needs a Jinja feature the engine lacks: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("chat template failed: ", e.what()));
  }
  return out;
}

}  // namespace weft

#include "common/chat_template.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace weft {
namespace {

constexpr absl::string_view kImStart = "<|im_start|>";
constexpr absl::string_view kImEnd = "<|im_end|>";

// Constructs whose rendering differs from plain ChatML for some messages.
constexpr absl::string_view kUnsupportedFeatures[] = {
    "tool_calls", "tools", "reasoning_content", "enable_thinking", "<think>"};

// Removes whitespace and turns double quotes into single ones, so that
// messages[0]["role"] != "system" and messages[0]['role']!='system' compare equal.
std::string NormalizeExpr(absl::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    out.push_back(c == '"' ? '\'' : c);
  }
  return out;
}

// Jinja string-literal escapes (\n, \t, \\, \', \"); other bytes as they are.
std::string UnescapeJinja(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out.push_back(s[i]);
      continue;
    }
    const char e = s[++i];
    switch (e) {
      case 'n': out.push_back('\n'); break;
      case 't': out.push_back('\t'); break;
      case 'r': out.push_back('\r'); break;
      default: out.push_back(e); break;
    }
  }
  return out;
}

// Position just after a test "messages[0] role != 'system'", or npos.
size_t FindFirstRoleNotSystem(absl::string_view jinja) {
  for (size_t p = jinja.find("messages[0]"); p != absl::string_view::npos;
       p = jinja.find("messages[0]", p + 1)) {
    const std::string expr = NormalizeExpr(jinja.substr(p, 48));
    for (absl::string_view form : {"messages[0]['role']!='system'", "messages[0].role!='system'"}) {
      if (absl::StartsWith(expr, form)) return p;
    }
  }
  return absl::string_view::npos;
}

// The default system text the template emits under that test, if any.
std::optional<std::string> FindDefaultSystem(absl::string_view jinja) {
  const size_t cond = FindFirstRoleNotSystem(jinja);
  if (cond == absl::string_view::npos) return std::nullopt;
  const std::string open = absl::StrCat(kImStart, "system");
  const size_t start = jinja.find(open, cond);
  if (start == absl::string_view::npos) return std::nullopt;
  size_t body = start + open.size();
  if (jinja.substr(body, 2) == "\\n") {
    body += 2;
  } else if (jinja.substr(body, 1) == "\n") {
    body += 1;
  } else {
    return std::nullopt;
  }
  const size_t end = jinja.find(kImEnd, body);
  if (end == absl::string_view::npos) return std::nullopt;
  return UnescapeJinja(jinja.substr(body, end - body));
}

bool UsesMessageField(absl::string_view jinja, absl::string_view field) {
  return absl::StrContains(jinja, absl::StrCat("message['", field, "']")) ||
         absl::StrContains(jinja, absl::StrCat("message[\"", field, "\"]")) ||
         absl::StrContains(jinja, absl::StrCat("message.", field));
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::FromTemplateText(absl::string_view jinja) {
  if (!absl::StrContains(jinja, kImStart) || !absl::StrContains(jinja, kImEnd)) {
    return absl::UnimplementedError(
        "chat template is not ChatML (<|im_start|>/<|im_end|>); only ChatML is rendered");
  }
  for (absl::string_view feature : kUnsupportedFeatures) {
    if (absl::StrContains(jinja, feature)) {
      return absl::UnimplementedError(absl::StrCat(
          "ChatML chat template uses '", feature, "', which native rendering does not support"));
    }
  }
  if (!UsesMessageField(jinja, "role") || !UsesMessageField(jinja, "content")) {
    return absl::UnimplementedError(
        "ChatML chat template does not render message role and content as expected");
  }
  ChatTemplate t;
  t.default_system_ = FindDefaultSystem(jinja);
  return t;
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromGguf(const GgufFile& gguf) {
  auto jinja = gguf.GetString("tokenizer.chat_template");
  if (absl::IsNotFound(jinja.status())) {
    return absl::UnimplementedError("the GGUF has no tokenizer.chat_template");
  }
  if (!jinja.ok()) return jinja.status();
  return FromTemplateText(*jinja);
}

absl::StatusOr<std::string> ChatTemplate::Render(absl::Span<const ChatMessage> messages,
                                                 const ChatRenderOptions& options) const {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role.empty() || absl::StrContains(m.role, "\n") || absl::StrContains(m.role, "<|")) {
      return absl::InvalidArgumentError(
          absl::StrCat("message ", i, ": role must be non-empty, without newlines or '<|'"));
    }
    if (i == 0 && default_system_.has_value() && m.role != "system") {
      absl::StrAppend(&out, kImStart, "system\n", *default_system_, kImEnd, "\n");
    }
    absl::StrAppend(&out, kImStart, m.role, "\n", m.content, kImEnd, "\n");
  }
  if (options.add_generation_prompt) absl::StrAppend(&out, kImStart, "assistant\n");
  return out;
}

}  // namespace weft

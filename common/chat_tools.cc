#include "common/chat_tools.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/tool_call_format.h"
#include "nlohmann/json.hpp"

namespace weft {
namespace {

using Json = nlohmann::ordered_json;

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string ToolsBlock(const Json& tools) {
  std::string out =
      "# Tools\n\nYou may call one or more functions to answer the user. The functions you "
      "can call are listed inside <tools></tools>, one JSON object per line:\n<tools>\n";
  for (const Json& t : tools) absl::StrAppend(&out, Dump(t), "\n");
  absl::StrAppend(&out,
                  "</tools>\n\nTo call a function, write its name and its arguments as a JSON "
                  "object inside <tool_call></tool_call> tags:\n",
                  "<tool_call>\n{\"name\": <function-name>, \"arguments\": <arguments-object>",
                  SyntaxOf(ToolCallFormat::kHermes).call_suffix);
  return out;
}

std::string CallsText(const ChatMessage& m) {
  std::string out = m.content;
  for (const ChatToolCall& c : m.tool_calls) {
    if (!out.empty()) out += "\n";
    absl::StrAppend(&out, ToolCallBegin(ToolCallFormat::kHermes, c.name),
                    c.arguments.empty() ? "{}" : c.arguments,
                    SyntaxOf(ToolCallFormat::kHermes).call_suffix);
  }
  return out;
}

}  // namespace

bool IsValidToolName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxToolNameBytes) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::StatusOr<std::vector<ChatMessage>> HermesToolMessages(absl::Span<const ChatMessage> messages,
                                                            absl::string_view tools_json,
                                                            bool system_role) {
  std::vector<ChatMessage> out;
  out.reserve(messages.size() + 1);
  if (!tools_json.empty()) {
    const Json tools = Json::parse(tools_json.begin(), tools_json.end(), nullptr,
                                   /*allow_exceptions=*/false);
    if (!tools.is_array()) return absl::InvalidArgumentError("tools: not a JSON array");
    std::string block = ToolsBlock(tools);
    if (!messages.empty() && messages.front().role == "system") {
      block = absl::StrCat(messages.front().content, "\n\n", block);
      messages.remove_prefix(1);
    }
    out.push_back(ChatMessage{"system", std::move(block)});
  }
  bool last_is_results = false;  // out.back() is a turn of tool results
  for (const ChatMessage& m : messages) {
    if (m.role == "tool") {
      const std::string result = absl::StrCat("<tool_response>\n", m.content, "\n</tool_response>");
      if (last_is_results) {
        absl::StrAppend(&out.back().content, "\n", result);
      } else {
        out.push_back(ChatMessage{"user", result});
        last_is_results = true;
      }
      continue;
    }
    out.push_back(ChatMessage{m.role, m.tool_calls.empty() ? m.content : CallsText(m)});
    last_is_results = false;
  }
  if (!system_role && !out.empty() && out.front().role == "system") {
    if (out.size() > 1 && out[1].role == "user") {
      out[1].content = absl::StrCat(out[0].content, "\n\n", out[1].content);
      out.erase(out.begin());
    } else {
      out.front().role = "user";
    }
  }
  return out;
}

}  // namespace weft

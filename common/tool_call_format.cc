#include "common/tool_call_format.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer.h"
#include "nlohmann/json.hpp"

namespace weft {
namespace {

using Json = nlohmann::ordered_json;

constexpr ToolCallSyntax kHermesSyntax = {
    "<tool_call>", "", "<tool_call>\n{\"name\": \"", "\", \"arguments\": ", "}\n</tool_call>",
    "\n", "", /*quoted_name=*/true, /*parallel=*/true};
constexpr ToolCallSyntax kLlama3Syntax = {
    "{\"name\": \"", "", "{\"name\": \"", "\", \"parameters\": ", "}",
    "", "", /*quoted_name=*/true, /*parallel=*/false};
constexpr ToolCallSyntax kMistralNemoSyntax = {
    "[TOOL_CALLS]", "[TOOL_CALLS][", "{\"name\": \"", "\", \"arguments\": ", "}",
    ", ", "]", /*quoted_name=*/true, /*parallel=*/true};
constexpr ToolCallSyntax kMistralArgsSyntax = {
    "[TOOL_CALLS]", "", "[TOOL_CALLS]", "[ARGS]", "",
    "", "", /*quoted_name=*/false, /*parallel=*/true};

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json CallTag(ToolCallFormat format, const ToolSchema& tool) {
  Json schema = tool.parameters.empty()
                    ? Json{{"type", "object"}, {"properties", Json::object()}}
                    : Json::parse(tool.parameters, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) schema = Json{{"type", "object"}};
  Json content = {{"type", "json_schema"}, {"json_schema", std::move(schema)},
                  {"max_whitespace_cnt", 1}};
  return {{"type", "tag"}, {"begin", ToolCallBegin(format, tool.name)},
          {"content", std::move(content)}, {"end", SyntaxOf(format).call_suffix}};
}

}  // namespace

absl::string_view ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3: return "llama3";
    case ToolCallFormat::kMistralNemo: return "mistral_nemo";
    case ToolCallFormat::kMistralArgs: return "mistral_args";
  }
  return "hermes";
}

ToolCallFormat DetectToolCallFormat(absl::string_view source, bool renders_tools) {
  if (!renders_tools) return ToolCallFormat::kHermes;
  if (absl::StrContains(source, "<tool_call>")) return ToolCallFormat::kHermes;
  if (absl::StrContains(source, "[TOOL_CALLS][")) return ToolCallFormat::kMistralNemo;
  if (absl::StrContains(source, "[TOOL_CALLS]") && absl::StrContains(source, "[ARGS]")) {
    return ToolCallFormat::kMistralArgs;
  }
  if (absl::StrContains(source, "<|start_header_id|>ipython<|end_header_id|>") &&
      absl::StrContains(source, "\"parameters\": ")) {
    return ToolCallFormat::kLlama3;
  }
  return ToolCallFormat::kHermes;
}

const ToolCallSyntax& SyntaxOf(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return kHermesSyntax;
    case ToolCallFormat::kLlama3: return kLlama3Syntax;
    case ToolCallFormat::kMistralNemo: return kMistralNemoSyntax;
    case ToolCallFormat::kMistralArgs: return kMistralArgsSyntax;
  }
  return kHermesSyntax;
}

std::string ToolCallBegin(ToolCallFormat format, absl::string_view name) {
  const ToolCallSyntax& s = SyntaxOf(format);
  return absl::StrCat(s.call_prefix, name, s.call_infix);
}

std::string ToolCallId(ToolCallFormat format, absl::string_view id_prefix, int index) {
  std::string id = absl::StrCat(id_prefix, index);
  if (format != ToolCallFormat::kMistralNemo && format != ToolCallFormat::kMistralArgs) return id;
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  for (unsigned char c : id) h = (h ^ c) * 1099511628211ull;
  static constexpr char kAlnum[] =
      "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  std::string out(9, '0');
  for (char& c : out) {
    c = kAlnum[h % 62];
    h /= 62;
  }
  return out;
}

std::vector<std::string> ToolCallMarkers(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return {"<tool_call>", "</tool_call>"};
    case ToolCallFormat::kLlama3: return {};
    case ToolCallFormat::kMistralNemo: return {"[TOOL_CALLS]"};
    case ToolCallFormat::kMistralArgs: return {"[TOOL_CALLS]", "[ARGS]"};
  }
  return {};
}

std::vector<std::pair<int32_t, std::string>> ToolCallMarkerTokens(const Tokenizer& tokenizer,
                                                                  ToolCallFormat format) {
  std::vector<std::pair<int32_t, std::string>> out;
  for (const std::string& marker : ToolCallMarkers(format)) {
    const int32_t id = tokenizer.FindToken(marker);
    if (id >= 0 && tokenizer.IsControl(id) && tokenizer.TokenText(id) == marker) {
      out.emplace_back(id, marker);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string ToolCallsStructuralTag(ToolCallFormat format, absl::Span<const ToolSchema> tools,
                                   ToolCallMode mode, bool parallel) {
  const ToolCallSyntax& s = SyntaxOf(format);
  const bool one = !parallel || !s.parallel;
  Json tags = Json::array();
  for (const ToolSchema& t : tools) tags.push_back(CallTag(format, t));
  Json calls = {{"type", "tags_with_separator"}, {"tags", std::move(tags)},
                {"separator", s.separator}, {"at_least_one", true}, {"stop_after_first", one}};
  Json format_json;
  if (*s.list_begin != '\0') {
    // The calls inside the list's brackets, one region.
    Json list = {{"type", "tag"}, {"begin", s.list_begin}, {"content", std::move(calls)},
                 {"end", s.list_end}};
    if (mode == ToolCallMode::kRequired) {
      format_json = std::move(list);
    } else {
      format_json = {{"type", "triggered_tags"}, {"triggers", Json::array({s.trigger})},
                     {"tags", Json::array({std::move(list)})}, {"at_least_one", false},
                     {"stop_after_first", true}};
    }
  } else if (mode == ToolCallMode::kRequired) {
    format_json = std::move(calls);
  } else {
    format_json = {{"type", "triggered_tags"}, {"triggers", Json::array({s.trigger})},
                   {"tags", std::move(calls["tags"])}, {"at_least_one", false},
                   {"stop_after_first", one}};
  }
  return Dump(Json{{"type", "structural_tag"}, {"format", std::move(format_json)}});
}

}  // namespace weft

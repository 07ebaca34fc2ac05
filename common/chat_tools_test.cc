#include "common/chat_tools.h"

#include <cctype>
#include <string>

#include "common/tool_call_format.h"
#include "nlohmann/json.hpp"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

using ::testing::HasSubstr;

TEST(ChatToolsTest, ToolNames) {
  EXPECT_TRUE(IsValidToolName("get_weather"));
  EXPECT_TRUE(IsValidToolName("A-9_z"));
  EXPECT_TRUE(IsValidToolName(std::string(64, 'a')));
  EXPECT_FALSE(IsValidToolName(std::string(65, 'a')));
  EXPECT_FALSE(IsValidToolName(""));
  EXPECT_FALSE(IsValidToolName("a b"));
  EXPECT_FALSE(IsValidToolName("a\"b"));
  EXPECT_FALSE(IsValidToolName("f\xC3\xA9"));
}

TEST(ChatToolsTest, CallTextIsBeginArgumentsEnd) {
  EXPECT_EQ(ToolCallBegin(ToolCallFormat::kHermes, "f") + "{\"x\": 1}" +
                SyntaxOf(ToolCallFormat::kHermes).call_suffix,
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>");
}

TEST(ChatToolsTest, ToolsGoIntoTheSystemTurn) {
  const std::string tools =
      R"([{"type": "function", "function": {"name": "get_weather", "parameters": {}}}])";
  // No system turn: one of its own at the front.
  auto m = HermesToolMessages({{"user", "hi"}}, tools);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ((*m)[0].role, "system");
  EXPECT_THAT((*m)[0].content, HasSubstr("<tools>\n{\"type\":\"function\",\"function\":{\"name\":"
                                         "\"get_weather\",\"parameters\":{}}}\n</tools>"));
  EXPECT_THAT((*m)[0].content, HasSubstr("<tool_call>\n{\"name\": <function-name>"));
  EXPECT_EQ((*m)[1].content, "hi");
  // A system turn: the tools follow its text, in the same turn.
  m = HermesToolMessages({{"system", "Be brief."}, {"user", "hi"}}, tools);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ((*m)[0].content.rfind("Be brief.\n\n# Tools", 0), 0u) << (*m)[0].content;
  // A template without a system turn: the text opens the first user turn.
  m = HermesToolMessages({{"system", "Be brief."}, {"user", "hi"}}, tools, /*system_role=*/false);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->size(), 1u);
  EXPECT_EQ((*m)[0].role, "user");
  EXPECT_EQ((*m)[0].content.rfind("Be brief.\n\n# Tools", 0), 0u);
  EXPECT_EQ((*m)[0].content.substr((*m)[0].content.size() - 4), "\n\nhi");
  EXPECT_FALSE(HermesToolMessages({{"user", "hi"}}, "{\"a\": 1}").ok());
  EXPECT_FALSE(HermesToolMessages({{"user", "hi"}}, "[").ok());
}

TEST(ChatToolsTest, CallsAndResultsBecomeText) {
  ChatMessage call{"assistant", ""};
  call.tool_calls = {{"call_1", "get_weather", R"({"city": "Oslo"})"}, {"call_2", "now", ""}};
  ChatMessage r1{"tool", "12 C"};
  r1.tool_call_id = "call_1";
  ChatMessage r2{"tool", "noon"};
  r2.tool_call_id = "call_2";
  auto m = HermesToolMessages({{"user", "q"}, call, r1, r2, {"assistant", "It is 12 C."}}, "");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->size(), 4u);  // no tools: no system turn; the two results are one user turn
  EXPECT_EQ((*m)[1].role, "assistant");
  EXPECT_EQ((*m)[1].content,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
            "</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>");
  EXPECT_TRUE((*m)[1].tool_calls.empty());
  EXPECT_EQ((*m)[2].role, "user");
  EXPECT_EQ((*m)[2].content,
            "<tool_response>\n12 C\n</tool_response>\n<tool_response>\nnoon\n</tool_response>");
  EXPECT_EQ((*m)[3].content, "It is 12 C.");
  // Text before the calls stays, on its own line.
  call.content = "Let me look.";
  call.tool_calls.resize(1);
  m = HermesToolMessages({call}, "");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)[0].content.rfind("Let me look.\n<tool_call>\n", 0), 0u);
}

using Json = nlohmann::ordered_json;

TEST(ToolCallFormatTest, CallTextOfEachFormat) {
  auto call = [](ToolCallFormat f) {
    const ToolCallSyntax& s = SyntaxOf(f);
    return std::string(s.list_begin) + ToolCallBegin(f, "f") + "{\"x\": 1}" + s.call_suffix +
           s.list_end;
  };
  EXPECT_EQ(call(ToolCallFormat::kLlama3), "{\"name\": \"f\", \"parameters\": {\"x\": 1}}");
  EXPECT_EQ(call(ToolCallFormat::kMistralNemo),
            "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\": 1}}]");
  EXPECT_EQ(call(ToolCallFormat::kMistralArgs), "[TOOL_CALLS]f[ARGS]{\"x\": 1}");
  for (ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3,
                           ToolCallFormat::kMistralNemo, ToolCallFormat::kMistralArgs}) {
    // In "auto" mode a call is found by its trigger: the call's text must start with it.
    EXPECT_EQ(call(f).rfind(SyntaxOf(f).trigger, 0), 0u) << ToolCallFormatName(f);
  }
}

TEST(ToolCallFormatTest, MistralIdsAreNineAlphanumericCharacters) {
  EXPECT_EQ(ToolCallId(ToolCallFormat::kHermes, "call_r_0_", 3), "call_r_0_3");
  EXPECT_EQ(ToolCallId(ToolCallFormat::kLlama3, "call_r_0_", 3), "call_r_0_3");
  const std::string a = ToolCallId(ToolCallFormat::kMistralNemo, "call_r_0_", 0);
  const std::string b = ToolCallId(ToolCallFormat::kMistralNemo, "call_r_0_", 1);
  ASSERT_EQ(a.size(), 9u);
  for (char c : a) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << a;
  EXPECT_NE(a, b);
  EXPECT_EQ(a, ToolCallId(ToolCallFormat::kMistralArgs, "call_r_0_", 0));  // deterministic
}

TEST(ToolCallFormatTest, StructuralTagShapes) {
  const ToolSchema tools[] = {{"f", R"({"type": "object"})"}, {"g", ""}};
  // Hermes, required: the calls and nothing else, separated by "\n".
  Json t = Json::parse(
      ToolCallsStructuralTag(ToolCallFormat::kHermes, tools, ToolCallMode::kRequired, true));
  EXPECT_EQ(t["type"], "structural_tag");
  EXPECT_EQ(t["format"]["type"], "tags_with_separator");
  EXPECT_EQ(t["format"]["separator"], "\n");
  EXPECT_EQ(t["format"]["stop_after_first"], false);
  EXPECT_EQ(t["format"]["tags"][1]["begin"], "<tool_call>\n{\"name\": \"g\", \"arguments\": ");
  EXPECT_EQ(t["format"]["tags"][1]["content"]["json_schema"]["type"], "object");
  // Llama 3: one call at most, whatever the request says.
  t = Json::parse(ToolCallsStructuralTag(ToolCallFormat::kLlama3, tools, ToolCallMode::kAuto, true));
  EXPECT_EQ(t["format"]["type"], "triggered_tags");
  EXPECT_EQ(t["format"]["triggers"][0], "{\"name\": \"");
  EXPECT_EQ(t["format"]["stop_after_first"], true);
  EXPECT_EQ(t["format"]["tags"][0]["end"], "}");
  // Mistral Nemo: the calls inside one [TOOL_CALLS][...] list.
  t = Json::parse(
      ToolCallsStructuralTag(ToolCallFormat::kMistralNemo, tools, ToolCallMode::kAuto, false));
  EXPECT_EQ(t["format"]["triggers"][0], "[TOOL_CALLS]");
  const Json& list = t["format"]["tags"][0];
  EXPECT_EQ(list["begin"], "[TOOL_CALLS][");
  EXPECT_EQ(list["end"], "]");
  EXPECT_EQ(list["content"]["separator"], ", ");
  EXPECT_EQ(list["content"]["stop_after_first"], true);
}

}  // namespace
}  // namespace weft

#include "common/chat_tools.h"

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
  EXPECT_EQ(ToolCallBegin("f") + "{\"x\": 1}" + kToolCallEnd,
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

}  // namespace
}  // namespace weft

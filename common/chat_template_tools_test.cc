// Tool turns through ChatTemplate: templates that render tools themselves get them
// (Qwen2.5's), templates that cannot (SmolLM2's ChatML, Gemma's) get the Hermes-style
// fallback of common/chat_tools.h when the caller asks for it.
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/chat_template.h"
#include "common/testing/llama_cpp_data.h"
#include "common/tokenizer_test_util.h"

namespace weft {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kSmolLmTemplate[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
    "Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

constexpr char kTools[] =
    R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather now",)"
    R"( "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])";

// user -> assistant call -> tool result -> (generation prompt)
std::vector<ChatMessage> RoundTrip() {
  ChatMessage call{"assistant", ""};
  call.tool_calls = {{"call_7", "get_weather", R"({"city": "Oslo"})"}};
  ChatMessage result{"tool", "12 C and rain"};
  result.tool_call_id = "call_7";
  return {{"user", "Weather in Oslo?"}, call, result};
}

TEST(ChatTemplateToolsTest, ChatMlGetsTheHermesFallback) {
  auto t = ChatTemplate::Parse(kSmolLmTemplate, "<|im_start|>", "<|im_end|>");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->renders_tools());
  ChatRenderOptions o;
  o.tools_json = kTools;
  o.tools_fallback = true;
  auto r = t->Render(RoundTrip(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text.rfind("<|im_start|>system\n# Tools\n", 0), 0u) << r->text;
  EXPECT_THAT(r->text, HasSubstr("\"name\":\"get_weather\""));
  EXPECT_THAT(r->text, HasSubstr("<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", "
                                 "\"arguments\": {\"city\": \"Oslo\"}}\n</tool_call><|im_end|>\n"));
  EXPECT_THAT(r->text, HasSubstr("<|im_start|>user\n<tool_response>\n12 C and rain\n"
                                 "</tool_response><|im_end|>\n<|im_start|>assistant\n"));
  // Everything the fallback wrote came from the request: literal spans, never markup.
  size_t literal = 0;
  for (const auto& [b, e] : r->literal_spans) literal += e - b;
  EXPECT_GT(literal, 200u);
  // Without the fallback the template sees the turns as they are (as transformers does).
  o.tools_fallback = false;
  r = t->Render(RoundTrip(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->text, Not(HasSubstr("get_weather")));
  EXPECT_THAT(r->text, HasSubstr("<|im_start|>tool\n12 C and rain<|im_end|>"));
}

class ChatTemplateFileTest : public ::testing::Test {
 protected:
  std::optional<ChatTemplate> Load(const std::string& dir, const std::string& name) {
    auto source = testing::ReadFile(dir + "/models/templates/" + name);
    EXPECT_TRUE(source.ok()) << source.status();
    if (!source.ok()) return std::nullopt;
    auto t = ChatTemplate::Parse(*source, "<bos>", "<eos>");
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return std::nullopt;
    return *std::move(t);
  }
};

TEST_F(ChatTemplateFileTest, GemmaGetsTheFallbackAndStillAlternates) {
  WEFT_REQUIRE_LLAMA_CPP_DATA(dir);
  auto t = Load(dir, "google-gemma-2-2b-it.jinja");
  ASSERT_TRUE(t.has_value());
  EXPECT_FALSE(t->renders_tools());
  ChatRenderOptions o;
  o.tools_json = kTools;
  o.tools_fallback = true;
  auto r = t->Render(RoundTrip(), o);
  ASSERT_TRUE(r.ok()) << r.status();  // Gemma raises unless user and model alternate
  EXPECT_THAT(r->text, HasSubstr("<tools>"));
  EXPECT_THAT(r->text, HasSubstr("<start_of_turn>model\n<tool_call>\n{\"name\": \"get_weather\""));
  EXPECT_THAT(r->text, HasSubstr("<start_of_turn>user\n<tool_response>\n12 C and rain"));
}

TEST_F(ChatTemplateFileTest, QwenRendersToolsItself) {
  WEFT_REQUIRE_LLAMA_CPP_DATA(dir);
  auto t = Load(dir, "Qwen-Qwen2.5-7B-Instruct.jinja");
  ASSERT_TRUE(t.has_value());
  EXPECT_TRUE(t->renders_tools());
  ChatRenderOptions o;
  o.tools_json = kTools;
  o.tools_fallback = true;  // not needed: the template's own rendering is used
  auto r = t->Render(RoundTrip(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->text, Not(HasSubstr("# Tools\n\nYou may call one or more functions to answer")));
  EXPECT_THAT(r->text, HasSubstr("\"name\": \"get_weather\""));
  // Qwen writes the call's arguments with tojson: they reached it as an object.
  EXPECT_THAT(r->text, HasSubstr("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                 "{\"city\": \"Oslo\"}}\n</tool_call>"));
  EXPECT_THAT(r->text, HasSubstr("<tool_response>\n12 C and rain\n</tool_response>"));
}

// The tool-call format each template is held to (common/tool_call_format.h's rule).
TEST_F(ChatTemplateFileTest, ToolCallFormatIsDetectedFromTheTemplate) {
  WEFT_REQUIRE_LLAMA_CPP_DATA(dir);
  const std::vector<std::pair<std::string, ToolCallFormat>> cases = {
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::kLlama3},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolCallFormat::kLlama3},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolCallFormat::kLlama3},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::kMistralNemo},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", ToolCallFormat::kMistralArgs},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", ToolCallFormat::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::kHermes},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::kHermes},
      {"google-gemma-2-2b-it.jinja", ToolCallFormat::kHermes},  // fallback
  };
  for (const auto& [name, format] : cases) {
    auto t = Load(dir, name);
    ASSERT_TRUE(t.has_value()) << name;
    EXPECT_EQ(ToolCallFormatName(t->tool_call_format()), ToolCallFormatName(format)) << name;
  }
  auto smol = ChatTemplate::Parse(kSmolLmTemplate, "<|im_start|>", "<|im_end|>");
  ASSERT_TRUE(smol.ok());
  EXPECT_EQ(smol->tool_call_format(), ToolCallFormat::kHermes);  // ChatML: the fallback
  // The fallback wins over markers in a template that cannot render tools.
  EXPECT_EQ(DetectToolCallFormat("[TOOL_CALLS][", /*renders_tools=*/false),
            ToolCallFormat::kHermes);
}

// Native templates render an earlier call themselves from OpenAI's shape, in the form
// the grammar then holds the model to (ToolCallBegin + arguments + call_suffix).
TEST_F(ChatTemplateFileTest, NativeTemplatesRenderEarlierCallsInTheirFormat) {
  WEFT_REQUIRE_LLAMA_CPP_DATA(dir);
  struct Case {
    const char* file;
    const char* id;
    const char* expected;
  };
  const Case cases[] = {
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", "call_7",
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}"},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", "call_7",
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}"},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", "call_7",
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}"},
      // Nemo adds the call's id, which must be 9 characters (ToolCallId makes such).
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", "a1B2c3D4e",
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}, "
       "\"id\": \"a1B2c3D4e\"}]"},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", "a1B2c3D4e",
       "[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{\"city\": \"Oslo\"}"},
  };
  for (const Case& c : cases) {
    auto t = Load(dir, c.file);
    ASSERT_TRUE(t.has_value()) << c.file;
    EXPECT_TRUE(t->renders_tools()) << c.file;
    std::vector<ChatMessage> turns = RoundTrip();
    turns[1].tool_calls[0].id = c.id;
    turns[2].tool_call_id = c.id;
    ChatRenderOptions o;
    o.tools_json = kTools;
    o.tools_fallback = true;
    o.now = 0;
    auto r = t->Render(turns, o);
    ASSERT_TRUE(r.ok()) << c.file << ": " << r.status();
    EXPECT_THAT(r->text, HasSubstr(c.expected)) << c.file;
    EXPECT_THAT(r->text, HasSubstr("12 C and rain")) << c.file;
    EXPECT_THAT(r->text, Not(HasSubstr("<tool_call>"))) << c.file;
  }
}

}  // namespace
}  // namespace weft

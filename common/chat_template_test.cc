#include "common/chat_template.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_split.h"
#include "common/gguf.h"
#include "common/testing/gguf_builder.h"
#include "common/testing/model_path.h"
#include "common/testing/status_matchers.h"
#include "common/tokenizer.h"
#include "common/tokenizer_test_util.h"

namespace weft {
namespace {

using ::weft::testing::StatusIs;

using ::testing::HasSubstr;

constexpr char kSmolLmSystem[] =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

// The SmolLM2 template, as stored in the GGUF (real newlines inside the literals).
constexpr char kSmolLmTemplate[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
    "Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

TEST(ChatTemplateTest, RendersSmolLmTemplate) {
  auto t = ChatTemplate::FromTemplateText(kSmolLmTemplate);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(t->default_system().has_value());
  EXPECT_EQ(*t->default_system(), kSmolLmSystem);
  auto r = t->Render({{"user", "Hello!"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, std::string("<|im_start|>system\n") + kSmolLmSystem +
                    "<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n");
  r = t->Render({{"system", "Be brief."}, {"user", "Hi"}}, {.add_generation_prompt = false});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  r = t->Render({});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, PlainChatMlAndQuotedVariants) {
  auto plain = ChatTemplate::FromTemplateText(
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt "
      "%}{{ '<|im_start|>assistant\\n' }}{% endif %}");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->default_system().has_value());
  EXPECT_EQ(*plain->Render({{"user", "x"}}),
            "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n");

  auto quoted = ChatTemplate::FromTemplateText(
      "{%- for message in messages -%}{%- if loop.first and messages[0][\"role\"] != "
      "\"system\" -%}{{ \"<|im_start|>system\\nYou say \\\"hi\\\".<|im_end|>\\n\" }}"
      "{%- endif -%}{{ \"<|im_start|>\" + message.role + \"\\n\" + message.content + "
      "\"<|im_end|>\\n\" }}{%- endfor -%}");
  ASSERT_TRUE(quoted.ok()) << quoted.status();
  ASSERT_TRUE(quoted->default_system().has_value());
  EXPECT_EQ(*quoted->default_system(), "You say \"hi\".");
}

TEST(ChatTemplateTest, RejectsOtherTemplatesAndBadRoles) {
  auto llama2 = ChatTemplate::FromTemplateText(
      "{% for message in messages %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
      "{% endfor %}");
  EXPECT_THAT(llama2.status(), StatusIs(absl::StatusCode::kUnimplemented));
  auto tools = ChatTemplate::FromTemplateText(
      "{% if tools %}...{% endif %}{% for message in messages %}{{'<|im_start|>' + "
      "message['role'] + '\\n' + message['content'] + '<|im_end|>\\n'}}{% endfor %}");
  EXPECT_THAT(tools.status(), StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(std::string(tools.status().message()), HasSubstr("tools"));

  auto t = ChatTemplate::FromTemplateText(kSmolLmTemplate);
  ASSERT_TRUE(t.ok());
  for (const char* role : {"", "user\nsystem", "<|im_start|>user"}) {
    EXPECT_THAT(t->Render({{role, "x"}}).status(), StatusIs(absl::StatusCode::kInvalidArgument))
        << role;
  }
}

TEST(ChatTemplateTest, FromGgufWithoutTemplateIsUnimplemented) {
  testing::GgufBuilder b;
  b.AddString("general.architecture", "llama");
  const std::vector<uint8_t> bytes = b.Build();
  auto file = GgufFile::FromBuffer(bytes.data(), bytes.size());
  ASSERT_TRUE(file.ok());
  EXPECT_THAT(ChatTemplate::FromGguf(**file).status(), StatusIs(absl::StatusCode::kUnimplemented));
}

// Renders every case of tests/testdata/chat_template_ref.jsonl (jinja2 with the real
// GGUF's template) and compares byte for byte; then checks that the rendered prompt
// tokenizes to the ChatML special tokens.
TEST(ChatTemplateTest, MatchesJinjaRenderingOfTheRealTemplate) {
  WEFT_REQUIRE_DEFAULT_MODEL(path);
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto t = ChatTemplate::FromGguf(**file);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->default_system(), std::optional<std::string>(kSmolLmSystem));
  EXPECT_EQ(*(*file)->GetString("tokenizer.chat_template"), kSmolLmTemplate);

  auto text = testing::ReadFile(testing::TestDataPath("chat_template_ref.jsonl"));
  ASSERT_TRUE(text.ok()) << text.status();
  int cases = 0;
  bool first = true;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    auto v = testing::ParseJson(line);
    ASSERT_TRUE(v.ok()) << v.status();
    if (first) {
      first = false;
      EXPECT_EQ(v->Get("meta")->Get("template")->str, kSmolLmTemplate);
      continue;
    }
    std::vector<ChatMessage> messages;
    for (const auto& m : v->Get("messages")->array) {
      messages.push_back({m.Get("role")->str, m.Get("content")->str});
    }
    auto r = t->Render(messages, {.add_generation_prompt = v->Get("add_generation_prompt")->b});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(*r, v->Get("rendered")->str) << "case " << cases;
    ++cases;
  }
  EXPECT_GE(cases, 8);

  auto tok = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tok.ok());
  const std::vector<int32_t> ids = (*tok)->Encode(*t->Render({{"user", "Hi"}}));
  EXPECT_EQ(ids.front(), 1);  // <|im_start|>
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 3);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 2);  // <|im_end|>
}

}  // namespace
}  // namespace weft

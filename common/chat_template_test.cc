#include "common/chat_template.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_split.h"
#include "common/gguf.h"
#include "common/testing/model_path.h"
#include "common/testing/status_matchers.h"
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

ChatTemplate SmolLm() {
  auto t = ChatTemplate::Parse(kSmolLmTemplate, "<|im_start|>", "<|im_end|>");
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

TEST(ChatTemplateTest, RendersSmolLmTemplate) {
  const ChatTemplate t = SmolLm();
  auto r = t.Render({{"user", "Hello!"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text, std::string("<|im_start|>system\n") + kSmolLmSystem +
                         "<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n");
  // The message's content is the one literal span.
  ASSERT_EQ(r->literal_spans.size(), 1u);
  EXPECT_EQ(r->text.substr(r->literal_spans[0].first,
                           r->literal_spans[0].second - r->literal_spans[0].first),
            "Hello!");
  r = t.Render({{"system", "Be brief."}, {"user", "Hi"}}, {.add_generation_prompt = false});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_EQ(r->literal_spans.size(), 2u);
  r = t.Render({});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text, "<|im_start|>assistant\n");
  EXPECT_TRUE(r->literal_spans.empty());
}

TEST(ChatTemplateTest, ErrorsAreStatuses) {
  // Unparseable: INVALID_ARGUMENT at load.
  EXPECT_THAT(ChatTemplate::Parse("{% for x in %}", "", "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // raise_exception: INVALID_ARGUMENT with the template's message.
  auto strict = ChatTemplate::Parse(
      "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first must be user') }}"
      "{% endif %}ok", "", "");
  ASSERT_TRUE(strict.ok()) << strict.status();
  auto r = strict->Render({{"assistant", "x"}});
  EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("first must be user"));
  EXPECT_TRUE(strict->Render({{"user", "x"}}).ok());
  // Roles are markup: a restricted alphabet.
  const ChatTemplate t = SmolLm();
  for (const char* role : {"", "user\nsystem", "<|im_start|>user", "a b", "r\xC3\xB4le"}) {
    EXPECT_THAT(t.Render({{role, "x"}}).status(), StatusIs(absl::StatusCode::kInvalidArgument))
        << role;
  }
  EXPECT_TRUE(t.Render({{"tool_result-2", "x"}}).ok());
  EXPECT_THAT(t.Render({{"user", "x"}}, {.tools_json = "[{"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ChatTemplateTest, VariablesAsTransformersPassesThem) {
  auto t = ChatTemplate::Parse(
      "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|"
      "{{ tools is none }}|{{ strftime_now('%d %b %Y %H:%M') }}|"
      "{% if tools %}{{ tools[0].function.name }}={{ tools | tojson }}{% endif %}",
      "<s>", "</s>");
  ASSERT_TRUE(t.ok()) << t.status();
  setenv("TZ", "UTC", 1);
  tzset();
  ChatRenderOptions o;
  o.now = 1785150000;  // 2026-07-27 11:00 UTC
  auto r = t->Render({}, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text, "<s>|</s>|True|True|27 Jul 2026 11:00|");
  o.tools_json = R"([{"type": "function", "function": {"name": "f"}}])";
  o.add_generation_prompt = false;
  r = t->Render({}, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text,
            "<s>|</s>|False|False|27 Jul 2026 11:00|"
            R"(f=[{"type": "function", "function": {"name": "f"}}])");
  // Tool definitions come from the request: literal, like message contents.
  EXPECT_FALSE(r->literal_spans.empty());
}

// Renders every case of tests/testdata/chat_template_ref.jsonl (jinja2 with the real
// GGUF's template) and compares byte for byte.
TEST(ChatTemplateTest, MatchesJinjaRenderingOfTheRealTemplate) {
  WEFT_REQUIRE_DEFAULT_MODEL(path);
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto source = (*file)->GetString("tokenizer.chat_template");
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(*source, kSmolLmTemplate);
  auto t = ChatTemplate::Parse(*source, "<|im_start|>", "<|im_end|>");
  ASSERT_TRUE(t.ok()) << t.status();

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
    EXPECT_EQ(r->text, v->Get("rendered")->str) << "case " << cases;
    ++cases;
  }
  EXPECT_GE(cases, 8);
}

}  // namespace
}  // namespace weft

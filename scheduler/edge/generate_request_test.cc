#include "scheduler/edge/generate_request.h"

#include <cmath>
#include <functional>
#include <limits>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/field_error.h"
#include "scheduler/edge/testing/byte_encoder.h"

namespace weft {
namespace {

using testing::ByteEncoder;
using weft::v1::GenerateRequest;

RequestLimits Limits() {
  RequestLimits l;
  l.vocab_size = 1000;
  l.max_model_len = 64;
  l.max_tokens = 32;
  return l;
}

constexpr size_t kMaxPromptBytes = 1 << 10;

GenerateRequest Text(const std::string& t) {
  GenerateRequest r;
  r.set_text(t);
  return r;
}

ByteEncoder Chat() {
  ByteEncoder e;
  e.chat = true;
  return e;
}

// Builds and validates as the frontend does; the failing field ("" when it passes).
std::string FailedField(const GenerateRequest& r, const ByteEncoder& enc = Chat()) {
  absl::StatusOr<RequestSpec> spec = BuildSpec(r, Limits(), kMaxPromptBytes, enc, [] { return 42u; });
  absl::Status s = spec.status();
  if (spec.ok()) s = ValidateRequest(*std::move(spec), Limits()).status();
  if (s.ok()) return "";
  std::optional<FieldError> e = GetFieldError(s, kRequestFieldSchema);
  return e ? e->field : absl::StrCat("(", absl::StatusCodeToString(s.code()), ")");
}

TEST(GenerateRequestTest, DefaultsApplied) {
  auto r = BuildSpec(Text("hello"), Limits(), kMaxPromptBytes, Chat(), [] { return 7u; });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt_token_ids.size(), 5u);
  EXPECT_EQ(r->sampling.temperature, 1.0f);
  EXPECT_EQ(r->sampling.top_p, 1.0f);
  EXPECT_EQ(r->sampling.top_k, 0);
  EXPECT_EQ(r->sampling.min_p, 0.0f);
  EXPECT_EQ(r->sampling.repetition_penalty, 1.0f);
  EXPECT_EQ(r->sampling.seed, 7u);
  EXPECT_EQ(r->sampling.num_logprobs, -1);
  EXPECT_EQ(r->n, 1);
  EXPECT_EQ(r->stopping.max_tokens, 32);  // min(cap 32, 64 - 5)
  auto longer = BuildSpec(Text(std::string(40, 'a')), Limits(), kMaxPromptBytes, Chat(),
                          [] { return 7u; });
  ASSERT_TRUE(longer.ok());
  EXPECT_EQ(longer->stopping.max_tokens, 24);  // context - prompt
}

TEST(GenerateRequestTest, ExplicitValuesKeptAndSeedNotDrawn) {
  GenerateRequest r = Text("hi");
  r.mutable_sampling()->set_temperature(0.0f);
  r.mutable_sampling()->set_seed(99);
  r.mutable_sampling()->set_top_k(5);
  r.set_n(3);
  r.set_logprobs(2);
  r.set_priority(-4);
  r.mutable_stopping()->set_max_tokens(10);
  r.mutable_stopping()->add_stop("\n\n");
  r.mutable_stopping()->add_stop_token_ids(2);
  r.mutable_stopping()->set_ignore_eos(true);
  bool drawn = false;
  auto v = BuildSpec(r, Limits(), kMaxPromptBytes, Chat(), [&] {
    drawn = true;
    return 1u;
  });
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FALSE(drawn);
  EXPECT_EQ(v->sampling.seed, 99u);
  EXPECT_EQ(v->sampling.temperature, 0.0f);
  EXPECT_EQ(v->sampling.top_k, 5);
  EXPECT_EQ(v->n, 3);
  EXPECT_EQ(v->sampling.num_logprobs, 2);
  EXPECT_EQ(v->priority, -4);
  EXPECT_EQ(v->stopping.max_tokens, 10);
  EXPECT_EQ(v->stopping.stop_strings, std::vector<std::string>{"\n\n"});
  EXPECT_EQ(v->stopping.stop_token_ids, std::vector<int32_t>{2});
  EXPECT_TRUE(v->stopping.ignore_eos);
  EXPECT_TRUE(ValidateRequest(*std::move(v), Limits()).ok());
}

struct Case {
  const char* name;
  std::function<void(GenerateRequest*)> mutate;
  const char* field;
};

// What the edge finds itself (the prompt) and, through the core's validator, the rest:
// each refusal names its field as data.
TEST(GenerateRequestTest, ConstraintsMapToTheCoreKinds) {
  using Kind = GrammarConstraint::Kind;
  GenerateRequest r = Text("hi");
  auto spec = BuildSpec(r, Limits(), kMaxPromptBytes, Chat(), [] { return 1u; });
  ASSERT_TRUE(spec.ok());
  EXPECT_FALSE(spec->constraint.has_value());
  r.mutable_constraint()->set_json_schema(R"({"type":"integer"})");
  spec = BuildSpec(r, Limits(), kMaxPromptBytes, Chat(), [] { return 1u; });
  ASSERT_TRUE(spec.ok() && spec->constraint);
  EXPECT_EQ(spec->constraint->kind, Kind::kJsonSchema);
  EXPECT_EQ(spec->constraint->source, R"({"type":"integer"})");
  r.mutable_constraint()->mutable_json_object();
  spec = BuildSpec(r, Limits(), kMaxPromptBytes, Chat(), [] { return 1u; });
  EXPECT_EQ(spec->constraint->kind, Kind::kJsonObject);
  r.mutable_constraint()->set_grammar("root ::= \"x\"");
  spec = BuildSpec(r, Limits(), kMaxPromptBytes, Chat(), [] { return 1u; });
  EXPECT_EQ(spec->constraint->kind, Kind::kEbnf);
  r.mutable_constraint()->mutable_choice()->add_choices("a");
  r.mutable_constraint()->mutable_choice()->add_choices("b");
  spec = BuildSpec(r, Limits(), kMaxPromptBytes, Chat(), [] { return 1u; });
  EXPECT_EQ(spec->constraint->kind, Kind::kChoice);
  EXPECT_EQ(spec->constraint->choices, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(FailedField(r), "");
  r.mutable_constraint()->set_structural_tag(R"({"type": "structural_tag"})");
  spec = BuildSpec(r, Limits(), kMaxPromptBytes, Chat(), [] { return 1u; });
  EXPECT_EQ(spec->constraint->kind, Kind::kStructuralTag);
  EXPECT_EQ(spec->constraint->source, R"({"type": "structural_tag"})");
}

TEST(GenerateRequestTest, BadInputNamesItsField) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Case> cases = {
      {"no prompt", [](GenerateRequest* r) { r->clear_text(); }, "prompt"},
      {"empty text", [](GenerateRequest* r) { r->set_text(""); }, "text"},
      {"text over the byte cap", [](GenerateRequest* r) { r->set_text(std::string(1025, 'a')); },
       "text"},
      {"empty ids", [](GenerateRequest* r) { r->mutable_token_ids(); }, "prompt"},
      {"token id = vocab", [](GenerateRequest* r) { r->mutable_token_ids()->add_ids(1000); },
       "prompt"},
      {"prompt fills context", [](GenerateRequest* r) { r->set_text(std::string(64, 'a')); },
       "prompt"},
      {"max_tokens 0", [](GenerateRequest* r) { r->mutable_stopping()->set_max_tokens(0); },
       "stopping.max_tokens"},
      {"max_tokens over cap", [](GenerateRequest* r) { r->mutable_stopping()->set_max_tokens(33); },
       "stopping.max_tokens"},
      {"n over cap", [](GenerateRequest* r) { r->set_n(17); }, "n"},
      {"constraint without a kind", [](GenerateRequest* r) { r->mutable_constraint(); },
       "constraint"},
      {"empty regex", [](GenerateRequest* r) { r->mutable_constraint()->set_regex(""); },
       "constraint.regex"},
      {"empty choice list",
       [](GenerateRequest* r) { r->mutable_constraint()->mutable_choice(); }, "constraint.choice"},
      {"a schema nested 40 deep",
       [](GenerateRequest* r) {
         r->mutable_constraint()->set_json_schema(std::string(40, '[') + std::string(40, ']'));
       },
       "constraint.json_schema"},
      {"logprobs over cap", [](GenerateRequest* r) { r->set_logprobs(21); }, "logprobs"},
      {"logprobs negative", [](GenerateRequest* r) { r->set_logprobs(-1); }, "logprobs"},
      {"temperature NaN", [=](GenerateRequest* r) { r->mutable_sampling()->set_temperature(nan); },
       "sampling.temperature"},
      {"top_p 0", [](GenerateRequest* r) { r->mutable_sampling()->set_top_p(0.0f); },
       "sampling.top_p"},
      {"stop token id over vocab",
       [](GenerateRequest* r) { r->mutable_stopping()->add_stop_token_ids(5000); },
       "stopping.stop_token_ids"},
      {"empty stop string", [](GenerateRequest* r) { r->mutable_stopping()->add_stop(""); },
       "stopping.stop"},
      {"bad chat role",
       [](GenerateRequest* r) {
         auto* m = r->mutable_chat()->add_messages();
         m->set_role("wizard");
         m->set_content("hi");
       },
       "chat.messages.role"},
      {"empty chat", [](GenerateRequest* r) { r->mutable_chat(); }, "chat"},
      {"tool calls on a user turn",
       [](GenerateRequest* r) {
         auto* m = r->mutable_chat()->add_messages();
         m->set_role("user");
         m->add_tool_calls()->set_name("f");
       },
       "chat.messages.tool_calls"},
      {"a call of a badly named tool",
       [](GenerateRequest* r) {
         auto* m = r->mutable_chat()->add_messages();
         m->set_role("assistant");
         m->add_tool_calls()->set_name("f g");
       },
       "chat.messages.tool_calls.name"},
      {"tool_call_id on an assistant turn",
       [](GenerateRequest* r) {
         auto* m = r->mutable_chat()->add_messages();
         m->set_role("assistant");
         m->set_tool_call_id("call_1");
       },
       "chat.messages.tool_call_id"},
      {"a tool without a name",
       [](GenerateRequest* r) {
         r->mutable_chat()->add_messages()->set_role("user");
         r->mutable_chat()->add_tools();
       },
       "chat.tools.name"},
      {"a tool defined twice",
       [](GenerateRequest* r) {
         r->mutable_chat()->add_messages()->set_role("user");
         r->mutable_chat()->add_tools()->set_name("f");
         r->mutable_chat()->add_tools()->set_name("f");
       },
       "chat.tools.name"},
      {"parameters that are no JSON object",
       [](GenerateRequest* r) {
         r->mutable_chat()->add_messages()->set_role("user");
         auto* t = r->mutable_chat()->add_tools();
         t->set_name("f");
         t->set_parameters("[1]");
       },
       "chat.tools.parameters"},
      {"129 tools",
       [](GenerateRequest* r) {
         r->mutable_chat()->add_messages()->set_role("user");
         for (int i = 0; i < 129; ++i) r->mutable_chat()->add_tools()->set_name(absl::StrCat("f", i));
       },
       "chat.tools"},
      {"tool definitions over the byte cap",
       [](GenerateRequest* r) {
         r->mutable_chat()->add_messages()->set_role("user");
         auto* t = r->mutable_chat()->add_tools();
         t->set_name("f");
         t->set_description(std::string(1025, 'd'));
       },
       "chat"},
      {"empty structural tag",
       [](GenerateRequest* r) { r->mutable_constraint()->set_structural_tag(""); },
       "constraint.structural_tag"},
  };
  for (const Case& c : cases) {
    GenerateRequest r = Text("hello");
    c.mutate(&r);
    EXPECT_EQ(FailedField(r), c.field) << c.name;
  }
  EXPECT_EQ(FailedField(Text("hello")), "");
}

TEST(GenerateRequestTest, ChatWithoutTemplateIsUnimplemented) {
  GenerateRequest r;
  auto* m = r.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("hi");
  EXPECT_EQ(FailedField(r), "");
  EXPECT_EQ(FailedField(r, ByteEncoder()), "(UNIMPLEMENTED)");
}

TEST(GenerateRequestTest, ModelMustBeTheServedOneAndAgreeWithTheHeader) {
  EXPECT_TRUE(CheckRequestedModel("", "", "smol").ok());
  EXPECT_TRUE(CheckRequestedModel("smol", "", "smol").ok());
  EXPECT_TRUE(CheckRequestedModel("", "smol", "smol").ok());
  EXPECT_TRUE(CheckRequestedModel("smol", "smol", "smol").ok());
  EXPECT_EQ(CheckRequestedModel("gpt-9", "", "smol").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(CheckRequestedModel("smol", "other", "smol").code(),
            absl::StatusCode::kInvalidArgument);
}

GenerateRequest ToolRequest() {
  GenerateRequest r;
  auto* chat = r.mutable_chat();
  auto* m = chat->add_messages();
  m->set_role("user");
  m->set_content("weather?");
  auto* t = chat->add_tools();
  t->set_name("get_weather");
  t->set_parameters(R"({"type": "object", "properties": {"city": {"type": "string"}}})");
  chat->add_tools()->set_name("get_time");
  return r;
}

// tool_choice becomes the structural tag of the encoder's (the model's) format, built
// here for both APIs; unset or none constrains nothing (clients from before the field).
TEST(GenerateRequestTest, ToolChoiceHoldsCallsToTheModelsFormat) {
  using TC = weft::v1::ToolChoice;
  GenerateRequest r = ToolRequest();
  EXPECT_FALSE(ReadsToolCalls(r));
  auto spec = BuildSpec(r, Limits(), kMaxPromptBytes, Chat(), [] { return 1u; });
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->constraint.has_value());
  r.mutable_chat()->mutable_tool_choice()->set_mode(TC::MODE_NONE);
  EXPECT_FALSE(ReadsToolCalls(r));

  r.mutable_chat()->mutable_tool_choice()->set_mode(TC::MODE_REQUIRED);
  EXPECT_TRUE(ReadsToolCalls(r));
  ByteEncoder llama = Chat();
  llama.format = ToolCallFormat::kLlama3;
  spec = BuildSpec(r, Limits(), kMaxPromptBytes, llama, [] { return 1u; });
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(spec->constraint.has_value());
  EXPECT_EQ(spec->constraint->kind, GrammarConstraint::Kind::kStructuralTag);
  const std::vector<ToolSchema> both = {{"get_weather", r.chat().tools(0).parameters()},
                                        {"get_time", ""}};
  EXPECT_EQ(spec->constraint->source, ToolCallsStructuralTag(ToolCallFormat::kLlama3, both,
                                                             ToolCallMode::kRequired, true));
  EXPECT_EQ(spec->constraint->request_field, "chat.tools");  // a refusal names the tools
  // A named function: its tag only; parallel_tool_calls false: one call.
  r.mutable_chat()->mutable_tool_choice()->set_function("get_time");
  r.mutable_chat()->set_parallel_tool_calls(false);
  ByteEncoder nemo = Chat();
  nemo.format = ToolCallFormat::kMistralNemo;
  spec = BuildSpec(r, Limits(), kMaxPromptBytes, nemo, [] { return 1u; });
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->constraint->source,
            ToolCallsStructuralTag(ToolCallFormat::kMistralNemo, {{"get_time", ""}},
                                   ToolCallMode::kRequired, false));
  r.mutable_chat()->mutable_tool_choice()->set_mode(TC::MODE_AUTO);
  spec = BuildSpec(r, Limits(), kMaxPromptBytes, Chat(), [] { return 1u; });
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->constraint->source, ToolCallsStructuralTag(ToolCallFormat::kHermes, both,
                                                             ToolCallMode::kAuto, false));
}

TEST(GenerateRequestTest, BadToolChoiceNamesItsField) {
  using TC = weft::v1::ToolChoice;
  GenerateRequest r = ToolRequest();
  r.mutable_chat()->mutable_tool_choice()->set_function("nope");
  EXPECT_EQ(FailedField(r), "chat.tool_choice.function");
  r.mutable_chat()->mutable_tool_choice()->set_mode(static_cast<TC::Mode>(9));
  EXPECT_EQ(FailedField(r), "chat.tool_choice.mode");
  r.mutable_chat()->mutable_tool_choice()->set_mode(TC::MODE_AUTO);
  r.mutable_constraint()->set_regex("a");
  EXPECT_EQ(FailedField(r), "constraint");
  r.clear_constraint();
  r.mutable_chat()->clear_tools();
  EXPECT_EQ(FailedField(r), "chat.tool_choice");
}

}  // namespace
}  // namespace weft

#include "scheduler/service/validation.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace weft {
namespace {

using weft::v1::GenerateRequest;

// One token per byte: enough to exercise every rule without a real tokenizer.
class ByteEncoder : public PromptEncoder {
 public:
  absl::StatusOr<std::vector<int32_t>> EncodeText(const std::string& text) const override {
    return std::vector<int32_t>(text.begin(), text.end());
  }
  absl::StatusOr<std::vector<int32_t>> EncodeChat(
      const weft::v1::ChatPrompt& chat) const override {
    if (!chatml_) return absl::UnimplementedError("model has no ChatML template");
    std::vector<int32_t> ids;
    for (const auto& m : chat.messages()) ids.insert(ids.end(), m.content().begin(), m.content().end());
    return ids;
  }
  bool chatml_ = true;
};

ValidationLimits Limits() {
  ValidationLimits l;
  l.model_name = "smol";
  l.vocab_size = 1000;
  l.context_length = 64;
  l.max_tokens_cap = 32;
  return l;
}

GenerateRequest Text(const std::string& t) {
  GenerateRequest r;
  r.set_text(t);
  return r;
}

absl::StatusCode Code(const GenerateRequest& r, const ByteEncoder& enc = ByteEncoder()) {
  return ValidateRequest(r, Limits(), enc, [] { return 42u; }).status().code();
}

TEST(ValidationTest, DefaultsApplied) {
  auto r = ValidateRequest(Text("hello"), Limits(), ByteEncoder(), [] { return 7u; });
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
  EXPECT_EQ(r->max_tokens, 32);  // min(cap 32, 64 - 5)
  auto longer = ValidateRequest(Text(std::string(40, 'a')), Limits(), ByteEncoder(),
                                [] { return 7u; });
  ASSERT_TRUE(longer.ok());
  EXPECT_EQ(longer->max_tokens, 24);  // context - prompt
}

TEST(ValidationTest, ExplicitValuesKeptAndSeedNotDrawn) {
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
  bool drawn = false;
  auto v = ValidateRequest(r, Limits(), ByteEncoder(), [&] {
    drawn = true;
    return 1u;
  });
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FALSE(drawn);
  EXPECT_EQ(v->sampling.seed, 99u);
  EXPECT_EQ(v->sampling.temperature, 0.0f);
  EXPECT_EQ(v->n, 3);
  EXPECT_EQ(v->sampling.num_logprobs, 2);
  EXPECT_EQ(v->priority, -4);
  EXPECT_EQ(v->max_tokens, 10);
  EXPECT_EQ(v->stop_strings.size(), 1u);
  EXPECT_EQ(v->stop_token_ids, std::vector<int32_t>{2});
}

struct Case {
  const char* name;
  std::function<void(GenerateRequest*)> mutate;
  absl::StatusCode code;
};

TEST(ValidationTest, BadInputMatrix) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<Case> cases = {
      {"no prompt", [](GenerateRequest* r) { r->clear_text(); }, absl::StatusCode::kInvalidArgument},
      {"empty text", [](GenerateRequest* r) { r->set_text(""); }, absl::StatusCode::kInvalidArgument},
      {"empty ids", [](GenerateRequest* r) { r->mutable_token_ids(); }, absl::StatusCode::kInvalidArgument},
      {"prompt fills context", [](GenerateRequest* r) { r->set_text(std::string(64, 'a')); },
       absl::StatusCode::kInvalidArgument},
      {"prompt + max_tokens over context",
       [](GenerateRequest* r) {
         r->set_text(std::string(40, 'a'));
         r->mutable_stopping()->set_max_tokens(30);
       },
       absl::StatusCode::kInvalidArgument},
      {"max_tokens 0", [](GenerateRequest* r) { r->mutable_stopping()->set_max_tokens(0); },
       absl::StatusCode::kInvalidArgument},
      {"max_tokens negative", [](GenerateRequest* r) { r->mutable_stopping()->set_max_tokens(-1); },
       absl::StatusCode::kInvalidArgument},
      {"max_tokens over cap", [](GenerateRequest* r) { r->mutable_stopping()->set_max_tokens(33); },
       absl::StatusCode::kInvalidArgument},
      {"n 0", [](GenerateRequest* r) { r->set_n(0); }, absl::StatusCode::kInvalidArgument},
      {"n over cap", [](GenerateRequest* r) { r->set_n(17); }, absl::StatusCode::kInvalidArgument},
      {"logprobs over cap", [](GenerateRequest* r) { r->set_logprobs(21); }, absl::StatusCode::kInvalidArgument},
      {"logprobs negative", [](GenerateRequest* r) { r->set_logprobs(-1); }, absl::StatusCode::kInvalidArgument},
      {"temperature < 0", [](GenerateRequest* r) { r->mutable_sampling()->set_temperature(-0.1f); },
       absl::StatusCode::kInvalidArgument},
      {"temperature NaN", [=](GenerateRequest* r) { r->mutable_sampling()->set_temperature(nan); },
       absl::StatusCode::kInvalidArgument},
      {"temperature inf", [=](GenerateRequest* r) { r->mutable_sampling()->set_temperature(inf); },
       absl::StatusCode::kInvalidArgument},
      {"top_p 0", [](GenerateRequest* r) { r->mutable_sampling()->set_top_p(0.0f); },
       absl::StatusCode::kInvalidArgument},
      {"top_p > 1", [](GenerateRequest* r) { r->mutable_sampling()->set_top_p(1.01f); },
       absl::StatusCode::kInvalidArgument},
      {"top_p NaN", [=](GenerateRequest* r) { r->mutable_sampling()->set_top_p(nan); },
       absl::StatusCode::kInvalidArgument},
      {"top_k < 0", [](GenerateRequest* r) { r->mutable_sampling()->set_top_k(-1); },
       absl::StatusCode::kInvalidArgument},
      {"min_p < 0", [](GenerateRequest* r) { r->mutable_sampling()->set_min_p(-0.5f); },
       absl::StatusCode::kInvalidArgument},
      {"min_p > 1", [](GenerateRequest* r) { r->mutable_sampling()->set_min_p(1.5f); },
       absl::StatusCode::kInvalidArgument},
      {"repetition 0", [](GenerateRequest* r) { r->mutable_sampling()->set_repetition_penalty(0.0f); },
       absl::StatusCode::kInvalidArgument},
      {"presence 3", [](GenerateRequest* r) { r->mutable_sampling()->set_presence_penalty(3.0f); },
       absl::StatusCode::kInvalidArgument},
      {"frequency -inf", [=](GenerateRequest* r) { r->mutable_sampling()->set_frequency_penalty(-inf); },
       absl::StatusCode::kInvalidArgument},
      {"token id = vocab",
       [](GenerateRequest* r) { r->mutable_token_ids()->add_ids(1000); },
       absl::StatusCode::kInvalidArgument},
      {"token id negative",
       [](GenerateRequest* r) { r->mutable_token_ids()->add_ids(-1); },
       absl::StatusCode::kInvalidArgument},
      {"stop token id over vocab",
       [](GenerateRequest* r) { r->mutable_stopping()->add_stop_token_ids(5000); },
       absl::StatusCode::kInvalidArgument},
      {"too many stop strings",
       [](GenerateRequest* r) {
         for (int i = 0; i < 17; ++i) r->mutable_stopping()->add_stop("x");
       },
       absl::StatusCode::kInvalidArgument},
      {"too long stop string",
       [](GenerateRequest* r) { r->mutable_stopping()->add_stop(std::string(257, 'x')); },
       absl::StatusCode::kInvalidArgument},
      {"empty stop string", [](GenerateRequest* r) { r->mutable_stopping()->add_stop(""); },
       absl::StatusCode::kInvalidArgument},
      {"unknown model", [](GenerateRequest* r) { r->set_model("gpt-9"); }, absl::StatusCode::kNotFound},
      {"bad chat role",
       [](GenerateRequest* r) {
         auto* m = r->mutable_chat()->add_messages();
         m->set_role("wizard");
         m->set_content("hi");
       },
       absl::StatusCode::kInvalidArgument},
      {"empty chat", [](GenerateRequest* r) { r->mutable_chat(); }, absl::StatusCode::kInvalidArgument},
  };
  for (const Case& c : cases) {
    GenerateRequest r = Text("hello");
    c.mutate(&r);
    EXPECT_EQ(Code(r), c.code) << c.name;
  }
}

TEST(ValidationTest, ModelNameEmptyOrExactIsAccepted) {
  GenerateRequest r = Text("x");
  EXPECT_EQ(Code(r), absl::StatusCode::kOk);
  r.set_model("smol");
  EXPECT_EQ(Code(r), absl::StatusCode::kOk);
}

TEST(ValidationTest, ChatWithoutTemplateIsUnimplemented) {
  GenerateRequest r;
  auto* m = r.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("hi");
  ByteEncoder enc;
  EXPECT_EQ(Code(r, enc), absl::StatusCode::kOk);
  enc.chatml_ = false;
  EXPECT_EQ(Code(r, enc), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace weft

#include "scheduler/request_spec.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/field_error.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

RequestLimits Limits() {
  RequestLimits l;
  l.vocab_size = 1000;
  l.max_model_len = 64;
  l.max_tokens = 32;
  return l;
}

RequestSpec Ok() {
  RequestSpec s;
  s.prompt_token_ids = {1, 2, 3, 4, 5};
  s.stopping.max_tokens = 8;
  return s;
}

// The failing field, as the edges read it (the payload, not the message).
std::string FailedField(const RequestSpec& spec, const RequestLimits& limits = Limits()) {
  absl::StatusOr<ValidRequest> v = ValidateRequest(spec, limits);
  if (v.ok()) return "";
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  std::optional<FieldError> e = GetFieldError(v.status(), kRequestFieldSchema);
  EXPECT_TRUE(e.has_value()) << v.status();
  if (!e) return "?";
  EXPECT_EQ(v.status().message(), e->field + ": " + e->reason);
  return e->field;
}

TEST(RequestSpecTest, AValidSpecIsKeptAsGiven) {
  RequestSpec s = Ok();
  s.n = 3;
  s.priority = -4;
  s.sampling.seed = 99;
  s.stopping.stop_strings = {"\n\n"};
  absl::StatusOr<ValidRequest> v = ValidateRequest(s, Limits());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->spec().prompt_token_ids, s.prompt_token_ids);
  EXPECT_EQ(v->spec().n, 3);
  EXPECT_EQ(v->spec().priority, -4);
  EXPECT_EQ(v->spec().sampling.seed, 99u);
  EXPECT_EQ(v->spec().stopping.stop_strings, s.stopping.stop_strings);
}

TEST(RequestSpecTest, DefaultMaxTokensIsTheCapOrWhatTheContextLeaves) {
  EXPECT_EQ(Limits().DefaultMaxTokens(5), 32);   // min(cap 32, 64 - 5)
  EXPECT_EQ(Limits().DefaultMaxTokens(40), 24);  // context - prompt
  EXPECT_EQ(Limits().DefaultMaxTokens(64), 0);   // the prompt check refuses it
}

struct Case {
  const char* name;
  std::function<void(RequestSpec*)> mutate;
  const char* field;
};

TEST(RequestSpecTest, EachRuleNamesItsField) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<Case> cases = {
      {"empty prompt", [](RequestSpec* s) { s->prompt_token_ids.clear(); }, "prompt"},
      {"prompt fills context", [](RequestSpec* s) { s->prompt_token_ids.assign(64, 1); }, "prompt"},
      {"token id = vocab", [](RequestSpec* s) { s->prompt_token_ids.push_back(1000); }, "prompt"},
      {"token id negative", [](RequestSpec* s) { s->prompt_token_ids.push_back(-1); }, "prompt"},
      {"max_tokens 0", [](RequestSpec* s) { s->stopping.max_tokens = 0; }, "stopping.max_tokens"},
      {"max_tokens over cap", [](RequestSpec* s) { s->stopping.max_tokens = 33; },
       "stopping.max_tokens"},
      {"prompt + max_tokens over context",
       [](RequestSpec* s) {
         s->prompt_token_ids.assign(40, 1);
         s->stopping.max_tokens = 30;
       },
       "stopping.max_tokens"},
      {"n 0", [](RequestSpec* s) { s->n = 0; }, "n"},
      {"n over cap", [](RequestSpec* s) { s->n = 17; }, "n"},
      {"logprobs over cap", [](RequestSpec* s) { s->sampling.num_logprobs = 21; }, "logprobs"},
      {"logprobs below none", [](RequestSpec* s) { s->sampling.num_logprobs = -2; }, "logprobs"},
      {"temperature < 0", [](RequestSpec* s) { s->sampling.temperature = -0.1f; },
       "sampling.temperature"},
      {"temperature NaN", [=](RequestSpec* s) { s->sampling.temperature = nan; },
       "sampling.temperature"},
      {"temperature inf", [=](RequestSpec* s) { s->sampling.temperature = inf; },
       "sampling.temperature"},
      {"top_p 0", [](RequestSpec* s) { s->sampling.top_p = 0; }, "sampling.top_p"},
      {"top_p NaN", [=](RequestSpec* s) { s->sampling.top_p = nan; }, "sampling.top_p"},
      {"top_k < 0", [](RequestSpec* s) { s->sampling.top_k = -1; }, "sampling.top_k"},
      {"min_p > 1", [](RequestSpec* s) { s->sampling.min_p = 1.5f; }, "sampling.min_p"},
      {"repetition 0", [](RequestSpec* s) { s->sampling.repetition_penalty = 0; },
       "sampling.repetition_penalty"},
      {"presence 3", [](RequestSpec* s) { s->sampling.presence_penalty = 3; },
       "sampling.presence_penalty"},
      {"frequency -inf", [=](RequestSpec* s) { s->sampling.frequency_penalty = -inf; },
       "sampling.frequency_penalty"},
      {"stop token id over vocab", [](RequestSpec* s) { s->stopping.stop_token_ids = {5000}; },
       "stopping.stop_token_ids"},
      {"too many stop token ids", [](RequestSpec* s) { s->stopping.stop_token_ids.assign(65, 1); },
       "stopping.stop_token_ids"},
      {"too many stop strings", [](RequestSpec* s) { s->stopping.stop_strings.assign(17, "x"); },
       "stopping.stop"},
      {"too long stop string",
       [](RequestSpec* s) { s->stopping.stop_strings = {std::string(257, 'x')}; }, "stopping.stop"},
      {"empty stop string", [](RequestSpec* s) { s->stopping.stop_strings = {""}; },
       "stopping.stop"},
      {"stop string not UTF-8", [](RequestSpec* s) { s->stopping.stop_strings = {"\xC3"}; },
       "stopping.stop"},
  };
  for (const Case& c : cases) {
    RequestSpec s = Ok();
    c.mutate(&s);
    EXPECT_EQ(FailedField(s), c.field) << c.name;
  }
  EXPECT_EQ(FailedField(Ok()), "");
}

// Was: the edge allowed n up to its own cap (16) and the core then refused n above
// --max_num_seqs saying "n must be in [1, 16]". Now there is one cap, and the scheduler's
// options refuse one above max_num_seqs.
TEST(RequestSpecTest, TheNCapIsTheOneTheMessageReports) {
  RequestLimits l = Limits();
  l.max_n = 4;
  RequestSpec s = Ok();
  s.n = 5;
  absl::StatusOr<ValidRequest> v = ValidateRequest(s, l);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().message(), "n: must be in [1, 4]");
  s.n = 4;
  EXPECT_TRUE(ValidateRequest(s, l).ok());
}

TEST(RequestSpecTest, LimitsAreChecked) {
  EXPECT_TRUE(Limits().Validate().ok());
  RequestLimits l = Limits();
  l.vocab_size = 0;
  EXPECT_FALSE(l.Validate().ok());
  l = Limits();
  l.max_model_len = 1;
  EXPECT_FALSE(l.Validate().ok());
  l = Limits();
  l.max_n = 0;
  EXPECT_FALSE(l.Validate().ok());
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

TEST(RequestSpecConstraintTest, AConstraintIsCheckedUnderItsField) {
  RequestSpec s = Ok();
  s.constraint = GrammarConstraint{};
  s.constraint->kind = GrammarConstraint::Kind::kRegex;
  s.constraint->source = "[a-z]+";
  EXPECT_EQ(FailedField(s), "");
  s.constraint->source = "";
  EXPECT_EQ(FailedField(s), "constraint.regex");
  s.constraint->kind = GrammarConstraint::Kind::kChoice;
  s.constraint->choices = {"a", ""};
  EXPECT_EQ(FailedField(s), "constraint.choice[1]");
  RequestLimits lim = Limits();
  lim.constraint.max_source_bytes = 8;
  s.constraint->kind = GrammarConstraint::Kind::kJsonSchema;
  s.constraint->source = R"({"type":"object"})";
  EXPECT_EQ(FailedField(s, lim), "constraint.json_schema");
  s.constraint->source = "{}";
  s.stopping.ignore_eos = true;
  EXPECT_EQ(FailedField(s, lim), "stopping.ignore_eos");
}

}  // namespace
}  // namespace weft

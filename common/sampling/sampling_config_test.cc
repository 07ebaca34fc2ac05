#include "common/sampling/sampling_config.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace weft {
namespace {

// The field that fails, as data: each caller names it in its own terms.
TEST(SamplingConfigTest, CheckNamesTheFirstFieldOutOfRange) {
  EXPECT_FALSE(SamplingConfig().Check().has_value());
  auto field = [](void (*set)(SamplingConfig*)) {
    SamplingConfig c;
    set(&c);
    const auto p = c.Check();
    return p ? std::string(p->field) : std::string();
  };
  EXPECT_EQ(field([](SamplingConfig* c) { c->temperature = -1; }), "temperature");
  EXPECT_EQ(field([](SamplingConfig* c) { c->temperature = NAN; }), "temperature");
  EXPECT_EQ(field([](SamplingConfig* c) {
              c->temperature = std::numeric_limits<float>::infinity();
            }),
            "temperature");
  EXPECT_EQ(field([](SamplingConfig* c) { c->top_k = -1; }), "top_k");
  EXPECT_EQ(field([](SamplingConfig* c) { c->top_p = 0; }), "top_p");
  EXPECT_EQ(field([](SamplingConfig* c) { c->top_p = 1.5f; }), "top_p");
  EXPECT_EQ(field([](SamplingConfig* c) { c->min_p = 1.5f; }), "min_p");
  EXPECT_EQ(field([](SamplingConfig* c) { c->repetition_penalty = 0; }), "repetition_penalty");
  EXPECT_EQ(field([](SamplingConfig* c) { c->presence_penalty = 2.5f; }), "presence_penalty");
  EXPECT_EQ(field([](SamplingConfig* c) { c->frequency_penalty = -3; }), "frequency_penalty");
  EXPECT_EQ(field([](SamplingConfig* c) { c->num_logprobs = -2; }), "num_logprobs");
  // Edges of the ranges are allowed.
  EXPECT_EQ(field([](SamplingConfig* c) {
              c->temperature = 0;
              c->top_p = 1;
              c->min_p = 1;
              c->repetition_penalty = 10;
              c->presence_penalty = -2;
              c->frequency_penalty = 2;
              c->num_logprobs = 0;
            }),
            "");
}

TEST(SamplingConfigTest, ValidateSaysFieldAndReason) {
  SamplingConfig c;
  c.top_p = 0;
  const absl::Status s = c.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "top_p: must be in (0, 1]");
}

}  // namespace
}  // namespace weft

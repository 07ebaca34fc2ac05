#include "scheduler/sequence.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace {

// Token t renders as the t-th entry of a small table.
class TableText : public TokenTextSource {
 public:
  absl::string_view TokenBytes(int32_t t) const override {
    static const char* kText[] = {"", "a", "b", " ", "STOP", "\xC3", "\xA9", "x", ""};
    return kText[t];
  }
  // Token 8 is a control token standing for a tool-call marker.
  absl::string_view ToolCallBytes(int32_t t) const override {
    return t == 8 ? "[TOOL_CALLS]" : TokenBytes(t);
  }
};

struct Fixture {
  explicit Fixture(StopConditions stop) {
    request.num_prompt_tokens = 2;
    request.stopping = std::move(stop);
    seq = std::make_unique<Sequence>(&request, 0, &request.stopping.stop_strings);
    seq->token_ids = {7, 7};
  }
  FinishReason Add(int32_t t, std::string* text) {
    return AppendTokenAndCheckStop(seq.get(), t, ctx, text);
  }
  Request request;
  std::unique_ptr<Sequence> seq;
  TableText text_source;
  std::vector<int32_t> eos = {0};
  StopContext ctx{eos, &text_source};
};

TEST(SequenceTest, AccountingOfLengths) {
  StopConditions stop;
  Fixture f(stop);
  f.seq->num_pending_samples = 1;
  f.seq->num_computed_tokens = 2;
  EXPECT_EQ(f.seq->num_output_tokens(), 0);
  EXPECT_EQ(f.seq->logical_length(), 3);
  EXPECT_EQ(f.seq->num_uncomputed(), 1);
}

TEST(SequenceTest, MaxTokensFinishesWithLength) {
  StopConditions stop;
  stop.max_tokens = 2;
  Fixture f(stop);
  std::string text;
  EXPECT_EQ(f.Add(1, &text), FinishReason::kNone);
  EXPECT_EQ(f.Add(2, &text), FinishReason::kLength);
  EXPECT_EQ(text, "ab");
}

TEST(SequenceTest, EosStopsUnlessIgnored) {
  StopConditions stop;
  Fixture f(stop);
  std::string text;
  EXPECT_EQ(f.Add(0, &text), FinishReason::kStopEos);
  EXPECT_EQ(f.seq->num_output_tokens(), 1);  // the EOS token is kept in the ids
  stop.ignore_eos = true;
  Fixture g(stop);
  EXPECT_EQ(g.Add(0, &text), FinishReason::kNone);
}

TEST(SequenceTest, StopTokenIdsStopWithoutText) {
  StopConditions stop;
  stop.stop_token_ids = {4};
  Fixture f(stop);
  std::string text;
  EXPECT_EQ(f.Add(1, &text), FinishReason::kNone);
  EXPECT_EQ(f.Add(4, &text), FinishReason::kStopToken);
  EXPECT_EQ(text, "a");
}

TEST(SequenceTest, StopStringAcrossTokens) {
  StopConditions stop;
  stop.stop_strings = {"b a"};
  Fixture f(stop);
  std::string text;
  EXPECT_EQ(f.Add(1, &text), FinishReason::kNone);
  EXPECT_EQ(f.Add(2, &text), FinishReason::kNone);
  EXPECT_EQ(text, "a");  // "b" held: it may start "b a"
  EXPECT_EQ(f.Add(3, &text), FinishReason::kNone);
  EXPECT_EQ(f.Add(1, &text), FinishReason::kStopString);
  EXPECT_EQ(text, "a");
}

// A tool-call request's text has the marker its control token stands for (the parser
// reads it); any other request's text has nothing for that token.
TEST(SequenceTest, ToolCallTextHasMarkerTokensOthersDoNot) {
  StopConditions stop;
  for (bool tool_calls : {false, true}) {
    Fixture f(stop);
    f.request.tool_call_text = tool_calls;
    std::string text;
    for (int32_t t : {1, 8, 2}) EXPECT_EQ(f.Add(t, &text), FinishReason::kNone);
    EXPECT_EQ(text, tool_calls ? "a[TOOL_CALLS]b" : "ab");
  }
}

TEST(SequenceTest, QueueKeyOrdersPriorityThenArrival) {
  Request hi, lo_early, lo_late;
  hi.priority = 5;
  hi.arrival = absl::FromUnixSeconds(10);
  hi.id = RequestId(3);
  lo_early.arrival = absl::FromUnixSeconds(1);
  lo_early.id = RequestId(1);
  lo_late.arrival = absl::FromUnixSeconds(2);
  lo_late.id = RequestId(2);
  Sequence a(&hi, 0, nullptr), b(&lo_early, 0, nullptr), c(&lo_late, 0, nullptr);
  EXPECT_TRUE(a.key() < b.key());
  EXPECT_TRUE(b.key() < c.key());
}

}  // namespace
}  // namespace weft

#include "scheduler/grammar/async_grammar.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "scheduler/grammar/testing/fill_gate.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

constexpr int32_t kVocab = 40;

// Allows exactly one token: the number of tokens accepted so far (then all, past 5).
// A fill blocks while the test holds the gate closed, so "not ready yet" is an event the
// test controls, not a timing.
class GatedGrammar : public SequenceGrammar {
 public:
  using Gate = ::weft::testing::FillGate;
  explicit GatedGrammar(std::shared_ptr<Gate> gate) : gate_(std::move(gate)) {}
  absl::Status Accept(int32_t token) override {
    if (token != pos_) return absl::FailedPreconditionError("not allowed");
    ++pos_;
    return absl::OkStatus();
  }
  bool FillNextTokenBitmask(uint32_t* words) override {
    gate_->Pass();
    if (pos_ > 5) return false;
    std::memset(words, 0, (kVocab + 31) / 32 * 4);
    words[pos_ / 32] |= 1u << (pos_ % 32);
    return true;
  }
  int32_t vocab_size() const override { return kVocab; }

 private:
  std::shared_ptr<Gate> gate_;
  int32_t pos_ = 0;
};

std::string MaskOf(int32_t token) {
  std::vector<uint32_t> w((kVocab + 31) / 32, 0);
  w[token / 32] |= 1u << (token % 32);
  return std::string(reinterpret_cast<const char*>(w.data()), w.size() * 4);
}

TEST(AsyncGrammarTest, InlineWithoutThreadsEveryMaskFollowsItsToken) {
  MaskThreads inline_threads(0);
  auto gate = std::make_shared<GatedGrammar::Gate>();
  AsyncGrammar g(std::make_unique<GatedGrammar>(gate), &inline_threads);
  std::string mask;
  for (int32_t t = 0; t <= 5; ++t) {
    EXPECT_TRUE(g.WaitReady(absl::InfinitePast()));  // computed inline: always ready
    g.TakeMask(&mask);
    EXPECT_EQ(mask, MaskOf(t));
    ASSERT_TRUE(g.Accept(t).ok());
  }
  g.TakeMask(&mask);
  EXPECT_TRUE(mask.empty());  // every token allowed: nothing to send
  EXPECT_EQ(g.Accept(9).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(AsyncGrammarTest, AMaskNotReadyIsReportedAtTheDeadlineThenTakenOnceReady) {
  MaskThreads threads(2);
  auto gate = std::make_shared<GatedGrammar::Gate>();
  AsyncGrammar g(std::make_unique<GatedGrammar>(gate), &threads);
  std::string mask;
  g.TakeMask(&mask);
  EXPECT_EQ(mask, MaskOf(0));

  gate->Set(false);
  ASSERT_TRUE(g.Accept(0).ok());  // starts the fill of the mask after token 0
  gate->WaitFills(2);             // it is running, held at the gate
  EXPECT_FALSE(g.WaitReady(absl::Now()));  // the planner would leave the row for later
  gate->Set(true);
  EXPECT_TRUE(g.WaitReady(absl::InfiniteFuture()));
  g.TakeMask(&mask);
  EXPECT_EQ(mask, MaskOf(1));
}

TEST(AsyncGrammarTest, ASequenceEndingWhileItsFillRunsLeavesTheFillSafe) {
  auto gate = std::make_shared<GatedGrammar::Gate>();
  {
    MaskThreads threads(1);
    gate->Set(false);
    auto g = std::make_unique<AsyncGrammar>(std::make_unique<GatedGrammar>(gate), &threads);
    gate->WaitFills(1);
    g.reset();       // the sequence is gone; its fill holds what it uses
    gate->Set(true);  // the fill finishes; the threads join at the end of the scope
  }
  EXPECT_EQ(gate->fills(), 1);
}

}  // namespace
}  // namespace weft

#include "worker/model/forward_batch.h"

#include <vector>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

using ::testing::HasSubstr;
using ::weft::testing::IsOk;
using ::weft::testing::StatusIs;

// Context 32, vocabulary 100, blocks of 4, a pool of 8 blocks.
constexpr BatchLimits kLimits{32, 100, 4, 8};

class ValidateBatchTest : public ::testing::Test {
 protected:
  // One sequence: `n` tokens (id 1) at `start`, the block table `table`.
  ForwardBatch One(int n, int start, std::vector<int32_t> table, int num_logits = 0) {
    tokens_.assign(n, 1);
    table_ = std::move(table);
    ForwardBatch b;
    SequenceChunk c;
    c.token_ids = tokens_;
    c.start_pos = start;
    c.block_table = table_;
    c.num_logits = num_logits;
    b.sequences.push_back(c);
    return b;
  }
  std::vector<int32_t> tokens_, table_;
};

TEST_F(ValidateBatchTest, AcceptsAChunkItsBlocksCover) {
  EXPECT_THAT(ValidateBatch(One(5, 3, {0, 7}), kLimits), IsOk());  // positions 3..7
  EXPECT_THAT(ValidateBatch(One(4, 28, {0, 1, 2, 3, 4, 5, 6, 7}), kLimits), IsOk());
  EXPECT_THAT(ValidateBatch(ForwardBatch(), kLimits), IsOk());
}

TEST_F(ValidateBatchTest, RefusesEachBrokenRuleNamingTheSequence) {
  const auto invalid = [](absl::string_view what) {
    return StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(std::string(what)));
  };
  EXPECT_THAT(ValidateBatch(One(0, 0, {0}), kLimits), invalid("chunk of 0 tokens"));
  EXPECT_THAT(ValidateBatch(One(1, -1, {0}), kLimits), invalid("at position -1"));
  EXPECT_THAT(ValidateBatch(One(5, 28, {0, 1, 2, 3, 4, 5, 6, 7, 0}), kLimits),
              invalid("context length 32"));
  EXPECT_THAT(ValidateBatch(One(5, 3, {0}), kLimits), invalid("block table of 1 blocks, 2 needed"));
  EXPECT_THAT(ValidateBatch(One(5, 3, {0, 8}), kLimits), invalid("block id 8 out of range"));
  EXPECT_THAT(ValidateBatch(One(5, 3, {-1, 0}), kLimits), invalid("block id -1 out of range"));
  EXPECT_THAT(ValidateBatch(One(1, 0, {0}, -1), kLimits), invalid("negative num_logits"));
  ForwardBatch b = One(2, 0, {0});
  tokens_[1] = 100;
  EXPECT_THAT(ValidateBatch(b, kLimits), invalid("sequence 0: token id 100 outside"));
  tokens_[1] = -1;
  EXPECT_THAT(ValidateBatch(b, kLimits), invalid("token id -1 outside"));
}

}  // namespace
}  // namespace weft

// SequenceSlots over a run of real plans (applied by the StateCache): which block-table
// rows and count rows each step uploads for add, grow, finish, preempt and re-admit.
#include "worker/backends/cuda/sequence_slots.h"

#include <vector>

#include "gtest/gtest.h"
#include "common/plan/state_cache.h"
#include "common/plan/testing/plan_builder.h"

namespace weft::cuda_backend {
namespace {

using ::weft::testing::AddNewSequence;

constexpr int32_t kBlockSize = 4;

class SequenceSlotsTest : public ::testing::Test {
 protected:
  SequenceSlotsTest() : cache_(kBlockSize, 64, 100), slots_(/*max_blocks_per_seq=*/8) {
    cache_.Reset(1);
  }

  // A decode step of a held sequence, with `new_blocks` appended to its table.
  void AddDecode(StepPlan* p, int64_t seq, std::vector<int32_t> new_blocks = {}) {
    const WorkerSequence* s = cache_.Find(seq);
    ASSERT_NE(s, nullptr);
    auto* c = p->add_cached_sequences();
    c->set_seq_id(seq);
    c->set_num_computed_tokens(s->num_computed_tokens);
    c->set_num_scheduled_tokens(1);
    c->set_do_sample(true);
    for (int32_t b : new_blocks) c->add_new_block_ids(b);
    p->set_num_scheduled_tokens(p->num_scheduled_tokens() + 1);
    p->set_num_sampled(p->num_sampled() + 1);
  }
  StepPlan Plan() {
    StepPlan p;
    p.set_step_id(next_step_++);
    return p;
  }
  // Applies the plan, updates the slots, "samples" token 7 for every sampled entry (the
  // device's append, then the host's).
  void Step(const StepPlan& plan) {
    ASSERT_TRUE(cache_.Apply(plan, &batch_).ok()) << cache_.Apply(plan, &batch_);
    slots_.Update(batch_);
    slots_.Sampled(batch_);
    for (const ScheduledSequence& sc : batch_.sequences) {
      if (sc.sample) cache_.AppendSampled(sc.state, 7);
    }
  }
  // (entry, slot, first, count) of every table upload of the last step.
  std::vector<std::vector<int32_t>> Tables() const {
    std::vector<std::vector<int32_t>> out;
    for (const TableUpload& u : slots_.table_uploads()) {
      out.push_back({u.entry, u.slot, u.first, u.count});
    }
    return out;
  }
  std::vector<std::vector<int32_t>> Counts() const {
    std::vector<std::vector<int32_t>> out;
    for (const CountUpload& u : slots_.count_uploads()) {
      out.push_back({u.entry, u.row, u.first, u.end});
    }
    return out;
  }

  StateCache cache_;
  SequenceSlots slots_;
  StepBatch batch_;
  int64_t next_step_ = 1;
};

using Rows = std::vector<std::vector<int32_t>>;

TEST_F(SequenceSlotsTest, AddGrowFinishPreemptReadmit) {
  // Add two sequences: whole tables, slots 0 and 1.
  StepPlan p = Plan();
  AddNewSequence(&p, 1 << 8, {1, 2, 3}, 3, {10});
  AddNewSequence(&p, 2 << 8, {4, 5, 6, 7, 8}, 5, {11, 12});
  Step(p);
  EXPECT_EQ(Tables(), (Rows{{0, 0, 0, 1}, {1, 1, 0, 2}}));
  EXPECT_EQ(slots_.table_entries_uploaded(), 3);
  // Decode both; sequence 1 reaches position 3 (its block 0 still holds it): nothing.
  p = Plan();
  AddDecode(&p, 1 << 8);
  AddDecode(&p, 2 << 8);
  Step(p);
  EXPECT_EQ(Tables(), Rows{});
  EXPECT_EQ(slots_.slot(0), 0);
  EXPECT_EQ(slots_.slot(1), 1);
  // Grow: sequence 1's position 4 needs a second block; only that entry is uploaded.
  p = Plan();
  AddDecode(&p, 1 << 8, {13});
  AddDecode(&p, 2 << 8);
  Step(p);
  EXPECT_EQ(Tables(), (Rows{{0, 0, 1, 1}}));
  // Finish sequence 1, add sequence 3: it reuses slot 0, whole table.
  p = Plan();
  p.add_finished_seq_ids(1 << 8);
  AddNewSequence(&p, 3 << 8, {9, 9}, 2, {20});
  AddDecode(&p, 2 << 8);
  Step(p);
  EXPECT_EQ(Tables(), (Rows{{0, 0, 0, 1}}));
  EXPECT_EQ(slots_.slot(0), 0);
  EXPECT_EQ(slots_.num_slots(), 2);
  EXPECT_EQ(slots_.num_held(), 2u);
  // Preempt sequence 2 (slot 1 freed); a step without it uploads nothing.
  p = Plan();
  p.add_preempted_seq_ids(2 << 8);
  AddDecode(&p, 3 << 8);
  Step(p);
  EXPECT_EQ(Tables(), Rows{});
  EXPECT_EQ(slots_.num_held(), 1u);
  // Re-admit sequence 2 with its outputs so far and new blocks: slot 1 again, whole table.
  p = Plan();
  AddNewSequence(&p, 2 << 8, {4, 5, 6, 7, 8, 7, 7, 7}, 5, {30, 31});
  AddDecode(&p, 3 << 8);
  Step(p);
  EXPECT_EQ(Tables(), (Rows{{0, 1, 0, 2}}));
  // A resumed re-admission of a held sequence (no preemption listed) replaces its table.
  p = Plan();
  auto* n = AddNewSequence(&p, 3 << 8, {9, 9, 7, 7, 7}, 2, {40, 41});
  n->set_resumed(true);
  AddDecode(&p, 2 << 8, {32});
  Step(p);
  EXPECT_EQ(Tables(), (Rows{{0, 0, 0, 2}, {1, 1, 2, 1}}));
  EXPECT_EQ(slots_.num_slots(), 2);
}

TEST_F(SequenceSlotsTest, BlocksPastTheContextAreNotUploaded) {
  StepPlan p = Plan();
  std::vector<int32_t> blocks;
  for (int32_t b = 0; b < 10; ++b) blocks.push_back(b);
  AddNewSequence(&p, 1 << 8, {1, 2, 3}, 3, blocks);
  Step(p);
  EXPECT_EQ(Tables(), (Rows{{0, 0, 0, 8}}));  // max_blocks_per_seq = 8
}

TEST_F(SequenceSlotsTest, PenaltyCountsAreMarkedOnceThenAppendedOnTheDevice) {
  SamplingConfig pen;
  pen.repetition_penalty = 1.2f;
  StepPlan p = Plan();
  AddNewSequence(&p, 1 << 8, {1, 2, 3}, 3, {10});       // no penalties: no count row
  AddNewSequence(&p, 2 << 8, {4, 5, 6}, 2, {11}, pen);  // history 3 tokens (1 output)
  Step(p);
  EXPECT_EQ(slots_.count_row(0), -1);
  EXPECT_EQ(slots_.count_row(1), 0);
  EXPECT_EQ(slots_.zeroed_count_rows(), std::vector<int32_t>{0});
  EXPECT_EQ(Counts(), (Rows{{1, 0, 0, 3}}));
  // Steady decode: the sampled token was counted on the device; nothing is uploaded.
  for (int i = 0; i < 3; ++i) {
    p = Plan();
    AddDecode(&p, 1 << 8, i == 0 ? std::vector<int32_t>{12} : std::vector<int32_t>{});
    AddDecode(&p, 2 << 8, i == 0 ? std::vector<int32_t>{13} : std::vector<int32_t>{});
    Step(p);
    EXPECT_EQ(Counts(), Rows{}) << i;
    EXPECT_TRUE(slots_.zeroed_count_rows().empty());
  }
  // The device state is lost (a failed step): everything is uploaded again, whole.
  slots_.Clear();
  p = Plan();
  AddDecode(&p, 2 << 8);
  Step(p);
  EXPECT_EQ(slots_.zeroed_count_rows(), std::vector<int32_t>{0});
  EXPECT_EQ(Counts(), (Rows{{0, 0, 0, 7}}));  // 3 + the 4 samples
  EXPECT_EQ(Tables(), (Rows{{0, 0, 0, 2}}));
  // Finishing frees the count row; the next penalized sequence takes row 0 again.
  p = Plan();
  p.add_finished_seq_ids(2 << 8);
  AddNewSequence(&p, 4 << 8, {8}, 1, {20}, pen);
  Step(p);
  EXPECT_EQ(slots_.count_row(0), 0);
  EXPECT_EQ(slots_.num_count_rows(), 1);
}

}  // namespace
}  // namespace weft::cuda_backend

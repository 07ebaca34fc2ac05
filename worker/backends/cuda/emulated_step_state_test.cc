// The CUDA backend's device-resident per-sequence state, without a GPU: a run of plans
// (add, grow, finish, preempt, re-admit, penalties) applied by the StateCache, diffed by
// SequenceSlots (worker/backends/cuda/sequence_slots.h), and uploaded through the device
// kernels' own source run by the host emulation (paged_kv.cu UpdateBlockTables,
// sampling.cu UpdateCounts) into persistent arrays kept across steps. After every step,
// every held sequence's table row and count row must equal what its host state implies.
#define WEFT_CUDA_HOST_EMULATION 1
#include "kernels/cuda/testing/host_emulation.h"
// The kernels under test, textually (the launch code is compiled out).
#include "kernels/cuda/paged_kv.cu"
#include "kernels/cuda/sampling.cu"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"
#include "common/plan/state_cache.h"
#include "common/plan/testing/plan_builder.h"
#include "worker/backends/cuda/sequence_slots.h"

namespace weft::kernels::cuda {
namespace {

constexpr int32_t kVocab = 50, kMaxBlocks = 6, kBlockSize = 2;

class DeviceState {
 public:
  // One step's diff, as CudaBackend::Step uploads it.
  void Apply(const StepBatch& batch, cuda_backend::SequenceSlots& slots) {
    slots.Update(batch);
    tables_.resize(std::max<size_t>(tables_.size(), slots.num_slots() * kMaxBlocks), -5);
    counts_.resize(std::max<size_t>(counts_.size(), slots.num_count_rows() * kVocab), 0x5a5a);
    std::vector<int32_t> pairs, marks;
    slots.TablePairs(batch, &pairs);
    slots.CountMarks(batch, &marks);
    const int32_t n = static_cast<int32_t>(pairs.size() / 2);
    if (n > 0) {
      EmulateLaunch(dim3((n + kTableThreads - 1) / kTableThreads), dim3(kTableThreads), 0,
                    [&] { UpdateBlockTablesKernel(tables_.data(), pairs.data(), n); });
    }
    CountUpdate u;
    u.counts = counts_.data();
    u.vocab = kVocab;
    u.zero_rows = slots.zeroed_count_rows().data();
    u.num_zero = static_cast<int32_t>(slots.zeroed_count_rows().size());
    u.marks = marks.data();
    u.num_marks = static_cast<int32_t>(marks.size() / 3);
    if (u.num_zero > 0) {
      EmulateLaunch(dim3(8, u.num_zero), dim3(kCountThreads), 0, [&] { ZeroCountRowsKernel(u); });
    }
    if (u.num_marks > 0) {
      EmulateLaunch(dim3((u.num_marks + kCountThreads - 1) / kCountThreads), dim3(kCountThreads),
                    0, [&] { MarkCountsKernel(u); });
    }
  }
  // Entry i's rows equal its host state.
  void Expect(const StepBatch& batch, const cuda_backend::SequenceSlots& slots) const {
    for (size_t i = 0; i < batch.sequences.size(); ++i) {
      const WorkerSequence& s = *batch.sequences[i].state;
      const size_t blocks = std::min<size_t>(s.block_ids.size(), kMaxBlocks);
      const auto row = tables_.begin() + slots.slot(i) * kMaxBlocks;
      EXPECT_TRUE(std::equal(s.block_ids.begin(), s.block_ids.begin() + blocks, row))
          << "table of sequence " << s.seq_id;
      if (!s.sampling.has_penalties()) {
        EXPECT_EQ(slots.count_row(i), -1);
        continue;
      }
      std::vector<int32_t> want(kVocab, 0);
      for (int32_t t = 0; t < static_cast<int32_t>(s.tokens.size()); ++t) {
        int32_t& c = want[s.tokens[t]];
        c = ((c & (kCountSeen - 1)) + (t >= s.num_prompt_tokens ? 1 : 0)) | kCountSeen;
      }
      EXPECT_TRUE(std::equal(want.begin(), want.end(),
                             counts_.begin() + slots.count_row(i) * kVocab))
          << "counts of sequence " << s.seq_id;
    }
  }

 private:
  std::vector<int32_t> tables_, counts_;
};

weft::v1::NewSequence* AddNew(StepPlan* p, int64_t seq, std::vector<int32_t> tokens,
                              int32_t prompt, std::vector<int32_t> blocks, bool penalties) {
  SamplingConfig sc;
  if (penalties) sc.frequency_penalty = 0.5f;  // a count row
  return ::weft::testing::AddNewSequence(p, seq, tokens, prompt, blocks, sc);
}

// A decode step of a held sequence: a new block from *next_block when its position needs
// one (and one more when `extra`, which the StateCache allows).
void AddDecode(StepPlan* p, const StateCache& cache, int64_t seq, int32_t* next_block,
               bool extra = false) {
  const WorkerSequence* s = cache.Find(seq);
  auto* c = p->add_cached_sequences();
  c->set_seq_id(seq);
  c->set_num_computed_tokens(s->num_computed_tokens);
  c->set_num_scheduled_tokens(1);
  c->set_do_sample(true);
  const size_t needed = (s->num_computed_tokens + kBlockSize) / kBlockSize;
  if (s->block_ids.size() < needed || extra) c->add_new_block_ids((*next_block)++);
  p->set_num_scheduled_tokens(p->num_scheduled_tokens() + 1);
  p->set_num_sampled(p->num_sampled() + 1);
}

// Tokens are appended by the host only (no device sampling here): the count rows then
// get each new token as an uploaded tail, and must still equal the host's history.
TEST(EmulatedStepStateTest, PersistentRowsFollowThePlans) {
  StateCache cache(kBlockSize, 100, kVocab);
  cache.Reset(1);
  cuda_backend::SequenceSlots slots(kMaxBlocks);
  DeviceState device;
  StepBatch batch;
  int64_t step = 1;
  int32_t next_block = 0, token = 3;
  auto run = [&](StepPlan p) {
    ASSERT_TRUE(cache.Apply(p, &batch).ok()) << cache.Apply(p, &batch);
    device.Apply(batch, slots);
    device.Expect(batch, slots);
    for (const ScheduledSequence& sc : batch.sequences) {
      if (sc.sample) cache.AppendSampled(sc.state, token++ % kVocab);
    }
  };
  auto plan = [&] {
    StepPlan p;
    p.set_step_id(step++);
    return p;
  };
  StepPlan p = plan();
  AddNew(&p, 1 << 8, {1, 2, 3}, 3, {next_block++, next_block++}, true);
  AddNew(&p, 2 << 8, {4, 4, 5}, 2, {next_block++, next_block++}, false);
  AddNew(&p, 3 << 8, {6, 7, 7, 7}, 2, {next_block++, next_block++}, true);
  run(p);
  for (int i = 0; i < 9; ++i) {  // decodes; every second one grows each table
    p = plan();
    for (int64_t seq : {1 << 8, 2 << 8, 3 << 8}) {
      AddDecode(&p, cache, seq, &next_block);
    }
    if (i == 4) p.add_preempted_seq_ids(4 << 8);  // not held: ignored
    run(p);
  }
  // Finish 1, preempt 3, add 4 (takes a freed slot and count row).
  p = plan();
  p.add_finished_seq_ids(1 << 8);
  p.add_preempted_seq_ids(3 << 8);
  AddNew(&p, 4 << 8, {9, 9, 9}, 1, {next_block++, next_block++}, true);
  AddDecode(&p, cache, 2 << 8, &next_block);
  run(p);
  EXPECT_EQ(slots.num_slots(), 3);
  EXPECT_EQ(slots.num_count_rows(), 2);
  // Re-admit 3 with its history so far and new blocks, then decode everything held.
  p = plan();
  AddNew(&p, 3 << 8, {6, 7, 7, 7, 1, 2, 3}, 2, {next_block++, next_block++, next_block++, next_block++}, true);
  run(p);
  for (int i = 0; i < 3; ++i) {
    p = plan();
    for (int64_t seq : {2 << 8, 3 << 8, 4 << 8}) AddDecode(&p, cache, seq, &next_block, true);
    run(p);
  }
  EXPECT_EQ(slots.num_slots(), 3);
}

}  // namespace
}  // namespace weft::kernels::cuda

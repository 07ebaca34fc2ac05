#include "common/plan/state_cache.h"

#include <string>

#include <gtest/gtest.h>

namespace weft {
namespace {

// Default sampling settings for sequence `seq` (its sample index from the id).
void DefaultSampling(int64_t seq, weft::v1::NewSequence* n) {
  ToSpec(SamplingConfig(), SequenceRef::FromSeqId(seq).sample_index, n->mutable_sampling());
}

StepPlan NewPlan(int64_t step, int64_t seq, std::vector<int32_t> tokens, int32_t computed,
                 int32_t scheduled, std::vector<int32_t> blocks) {
  StepPlan p;
  p.set_step_id(step);
  auto* n = p.add_new_sequences();
  n->set_seq_id(seq);
  DefaultSampling(seq, n);
  for (int32_t t : tokens) n->add_token_ids(t);
  n->set_num_prompt_tokens(static_cast<int32_t>(tokens.size()));
  n->set_num_computed_tokens(computed);
  n->set_num_scheduled_tokens(scheduled);
  for (int32_t b : blocks) n->add_block_ids(b);
  n->set_do_sample(computed + scheduled == static_cast<int32_t>(tokens.size()));
  p.set_num_scheduled_tokens(scheduled);
  p.set_num_sampled(n->do_sample() ? 1 : 0);
  return p;
}

weft::v1::CachedSequence* AddCached(StepPlan* p, int64_t seq, int32_t computed, int32_t n,
                                    bool sample) {
  auto* c = p->add_cached_sequences();
  c->set_seq_id(seq);
  c->set_num_computed_tokens(computed);
  c->set_num_scheduled_tokens(n);
  c->set_do_sample(sample);
  p->set_num_scheduled_tokens(p->num_scheduled_tokens() + n);
  p->set_num_sampled(p->num_sampled() + (sample ? 1 : 0));
  return c;
}

TEST(StateCacheTest, ChunkedPrefillThenDecodeUsesOwnSample) {
  StateCache cache(/*block_size=*/4, /*num_blocks=*/8, /*vocab_size=*/100);
  cache.Reset(1);
  StepBatch batch;
  // 6-token prompt, first chunk of 4 in block 3.
  ASSERT_TRUE(cache.Apply(NewPlan(1, 7, {1, 2, 3, 4, 5, 6}, 0, 4, {3}), &batch).ok());
  ASSERT_EQ(batch.sequences.size(), 1u);
  EXPECT_EQ(batch.sequences[0].start_pos, 0);
  EXPECT_EQ(batch.sequences[0].num_tokens, 4);
  EXPECT_FALSE(batch.sequences[0].sample);
  // Rest of the prompt: needs a second block.
  StepPlan p2;
  p2.set_step_id(2);
  AddCached(&p2, 7, 4, 2, true)->add_new_block_ids(5);
  ASSERT_TRUE(cache.Apply(p2, &batch).ok());
  EXPECT_FALSE(batch.sequences[0].is_new);  // cached
  EXPECT_EQ(batch.sequences[0].start_pos, 4);
  EXPECT_TRUE(batch.sequences[0].sample);
  EXPECT_EQ(batch.sequences[0].state->block_ids, (std::vector<int32_t>{3, 5}));
  cache.AppendSampled(batch.sequences[0].state, 42);
  // Decode: input is position 6 = the sampled 42.
  StepPlan p3;
  p3.set_step_id(3);
  AddCached(&p3, 7, 6, 1, true);
  ASSERT_TRUE(cache.Apply(p3, &batch).ok());
  EXPECT_EQ(batch.sequences[0].start_pos, 6);
  EXPECT_EQ(batch.sequences[0].state->tokens[6], 42);
  EXPECT_TRUE(batch.sequences[0].sample);
  EXPECT_EQ(batch.sequences[0].state->num_output_tokens, 1);
}

TEST(StateCacheTest, InconsistentPlansAreRejectedWithoutChangingState) {
  StateCache cache(4, 8, 100);
  cache.Reset(1);
  StepBatch batch;
  EXPECT_FALSE(cache.Apply(NewPlan(2, 1, {1, 2}, 0, 2, {0}), &batch).ok());       // step gap
  EXPECT_FALSE(cache.Apply(NewPlan(1, 1, {1, 2}, 0, 3, {0}), &batch).ok());       // past tokens
  EXPECT_FALSE(cache.Apply(NewPlan(1, 1, {1, 2, 3, 4, 5}, 0, 5, {0}), &batch).ok());  // blocks
  EXPECT_FALSE(cache.Apply(NewPlan(1, 1, {1, 2}, 0, 2, {8}), &batch).ok());       // block range
  EXPECT_FALSE(cache.Apply(NewPlan(1, 1, {1, 200}, 0, 2, {0}), &batch).ok());     // vocab
  StepPlan bad_total = NewPlan(1, 1, {1, 2}, 0, 2, {0});
  bad_total.set_num_scheduled_tokens(3);
  EXPECT_FALSE(cache.Apply(bad_total, &batch).ok());
  EXPECT_EQ(cache.num_sequences(), 0u);
  EXPECT_EQ(cache.next_step_id(), 1);
  ASSERT_TRUE(cache.Apply(NewPlan(1, 1, {1, 2}, 0, 2, {0}), &batch).ok());
  // Unknown cached sequence, and a new sequence that is already held.
  StepPlan p;
  p.set_step_id(2);
  AddCached(&p, 99, 0, 1, false);
  EXPECT_FALSE(cache.Apply(p, &batch).ok());
  StepPlan wrong_computed;
  wrong_computed.set_step_id(2);
  AddCached(&wrong_computed, 1, 1, 0, false);
  EXPECT_FALSE(cache.Apply(wrong_computed, &batch).ok());
  EXPECT_FALSE(cache.Apply(NewPlan(2, 1, {1, 2}, 0, 2, {0}), &batch).ok());
  EXPECT_EQ(cache.num_sequences(), 1u);
}

// With the model's context length given, a step that computes a position at or past it
// is refused, for a new and for a cached sequence (and nothing changes).
TEST(StateCacheTest, PositionsPastTheContextLengthAreRejected) {
  StateCache cache(/*block_size=*/4, /*num_blocks=*/8, /*vocab_size=*/100,
                   /*context_length=*/6);
  cache.Reset(1);
  StepBatch batch;
  EXPECT_FALSE(cache.Apply(NewPlan(1, 1, {1, 2, 3, 4, 5, 6, 7}, 0, 7, {0, 1}), &batch).ok());
  EXPECT_EQ(cache.num_sequences(), 0u);
  ASSERT_TRUE(cache.Apply(NewPlan(1, 1, {1, 2, 3, 4, 5, 6}, 0, 6, {0, 1}), &batch).ok());
  cache.AppendSampled(batch.sequences[0].state, 9);  // position 6: one past the limit
  StepPlan past;
  past.set_step_id(2);
  AddCached(&past, 1, 6, 1, true);
  const absl::Status s = cache.Apply(past, &batch);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("context length 6"), std::string::npos) << s;
  EXPECT_EQ(cache.next_step_id(), 2);
  // Without a limit (0) the same plan applies.
  StateCache unlimited(4, 8, 100);
  unlimited.Reset(1);
  EXPECT_TRUE(unlimited.Apply(NewPlan(1, 1, {1, 2, 3, 4, 5, 6, 7}, 0, 7, {0, 1}), &batch).ok());
}

// A sequence listed twice in one plan (new twice, cached twice, or resumed as new and
// cached) is refused; the duplicate check of a refused plan leaves nothing behind that
// would refuse the next, valid one.
TEST(StateCacheTest, DuplicateEntriesAreRejectedAcrossPlans) {
  StateCache cache(4, 8, 100);
  cache.Reset(1);
  StepBatch batch;
  StepPlan twice_new = NewPlan(1, 1, {1, 2}, 0, 2, {0});
  *twice_new.add_new_sequences() = twice_new.new_sequences(0);
  twice_new.set_num_scheduled_tokens(4);
  twice_new.set_num_sampled(2);
  EXPECT_FALSE(cache.Apply(twice_new, &batch).ok());
  ASSERT_TRUE(cache.Apply(NewPlan(1, 1, {1, 2}, 0, 2, {0}), &batch).ok());
  cache.AppendSampled(batch.sequences[0].state, 3);
  for (int attempt = 0; attempt < 2; ++attempt) {
    StepPlan twice_cached;
    twice_cached.set_step_id(2);
    AddCached(&twice_cached, 1, 2, 1, true);
    AddCached(&twice_cached, 1, 2, 1, true);
    const absl::Status s = cache.Apply(twice_cached, &batch);
    EXPECT_NE(s.message().find("scheduled twice"), std::string::npos) << s;
    StepPlan resumed_and_cached = NewPlan(2, 1, {1, 2, 3}, 0, 3, {0});
    resumed_and_cached.mutable_new_sequences(0)->set_resumed(true);
    resumed_and_cached.mutable_new_sequences(0)->set_num_prompt_tokens(2);
    resumed_and_cached.mutable_new_sequences(0)->set_num_output_tokens(1);
    AddCached(&resumed_and_cached, 1, 2, 1, true);
    const absl::Status r = cache.Apply(resumed_and_cached, &batch);
    EXPECT_NE(r.message().find("scheduled twice"), std::string::npos) << r;
  }
  EXPECT_EQ(cache.next_step_id(), 2);
  StepPlan once;
  once.set_step_id(2);
  AddCached(&once, 1, 2, 1, true);
  ASSERT_TRUE(cache.Apply(once, &batch).ok());
  StepPlan again;  // the same sequence in the next plan: not a duplicate
  again.set_step_id(3);
  cache.AppendSampled(batch.sequences[0].state, 4);
  AddCached(&again, 1, 3, 1, true);
  EXPECT_TRUE(cache.Apply(again, &batch).ok());
}

TEST(StateCacheTest, FinishedAndPreemptedAreDroppedAndMayComeBackAsNew) {
  StateCache cache(4, 8, 100);
  cache.Reset(10);
  StepBatch batch;
  ASSERT_TRUE(cache.Apply(NewPlan(10, 1, {5, 6}, 0, 2, {0}), &batch).ok());
  EXPECT_TRUE(batch.sequences[0].is_new);
  EXPECT_TRUE(batch.dropped_seq_ids.empty());
  cache.AppendSampled(batch.sequences[0].state, 9);
  StepPlan p = NewPlan(11, 1, {5, 6, 9}, 0, 3, {2});
  p.mutable_new_sequences(0)->set_num_prompt_tokens(2);
  p.mutable_new_sequences(0)->set_num_output_tokens(1);
  p.add_preempted_seq_ids(1);
  ASSERT_TRUE(cache.Apply(p, &batch).ok()) << cache.Apply(p, &batch);
  EXPECT_EQ(batch.sequences[0].state->block_ids, std::vector<int32_t>{2});
  EXPECT_EQ(batch.sequences[0].state->num_output_tokens, 1);
  EXPECT_TRUE(batch.sequences[0].is_new);  // re-admitted: its state was replaced
  EXPECT_EQ(batch.dropped_seq_ids, std::vector<int64_t>{1});
  StepPlan fin;
  fin.set_step_id(12);
  fin.add_finished_seq_ids(1);
  ASSERT_TRUE(cache.Apply(fin, &batch).ok());
  EXPECT_EQ(batch.dropped_seq_ids, std::vector<int64_t>{1});
  EXPECT_EQ(cache.num_sequences(), 0u);
  EXPECT_TRUE(batch.sequences.empty());
}

TEST(StateCacheTest, ForkSamplesFromItsParentsLogits) {
  StateCache cache(4, 8, 100);
  cache.Reset(1);
  StepBatch batch;
  StepPlan p = NewPlan(1, 256, {1, 2, 3, 4, 5}, 0, 5, {0, 1});
  auto* child = p.add_new_sequences();
  child->set_seq_id(257);
  DefaultSampling(257, child);
  for (int t : {1, 2, 3, 4, 5}) child->add_token_ids(t);
  child->set_num_prompt_tokens(5);
  child->set_num_computed_tokens(5);
  child->set_num_scheduled_tokens(0);
  child->add_block_ids(0);
  child->add_block_ids(2);
  child->set_do_sample(true);
  child->set_fork_parent_seq_id(256);
  p.set_num_sampled(2);
  auto* copy = p.add_block_copies();
  copy->set_src(1);
  copy->set_dst(2);
  ASSERT_TRUE(cache.Apply(p, &batch).ok()) << cache.Apply(p, &batch);
  ASSERT_EQ(batch.sequences.size(), 2u);
  EXPECT_EQ(batch.sequences[1].logits_from, 0);
  EXPECT_EQ(batch.sequences[1].num_tokens, 0);
  EXPECT_TRUE(batch.sequences[1].sample);
  EXPECT_EQ(batch.num_sampled, 2);
  // A fork whose parent is not in the plan is refused.
  StateCache other(4, 8, 100);
  other.Reset(1);
  StepPlan orphan = p;
  orphan.mutable_new_sequences(1)->set_fork_parent_seq_id(999);
  EXPECT_FALSE(other.Apply(orphan, &batch).ok());
}

// A prompt chunked over two steps: its forks come in the step that finishes it, when
// the parent is already a cached entry (the scheduler's randomized test found this).
TEST(StateCacheTest, ForkOfACachedParent) {
  StateCache cache(4, 8, 100);
  cache.Reset(1);
  StepBatch batch;
  ASSERT_TRUE(cache.Apply(NewPlan(1, 256, {1, 2, 3, 4, 5}, 0, 4, {0, 1}), &batch).ok());
  StepPlan p;
  p.set_step_id(2);
  auto* child = p.add_new_sequences();
  child->set_seq_id(257);
  DefaultSampling(257, child);
  for (int t : {1, 2, 3, 4, 5}) child->add_token_ids(t);
  child->set_num_prompt_tokens(5);
  child->set_num_computed_tokens(5);
  child->add_block_ids(0);
  child->add_block_ids(2);
  child->set_do_sample(true);
  child->set_fork_parent_seq_id(256);
  p.set_num_sampled(1);
  AddCached(&p, 256, 4, 1, true);
  ASSERT_TRUE(cache.Apply(p, &batch).ok()) << cache.Apply(p, &batch);
  ASSERT_EQ(batch.sequences.size(), 2u);
  EXPECT_EQ(batch.sequences[0].logits_from, 1);  // the cached parent's entry
  EXPECT_EQ(batch.sequences[1].state->seq_id, 256);
  // A parent that does not sample in the plan cannot be forked from.
  StateCache other(4, 8, 100);
  other.Reset(1);
  ASSERT_TRUE(other.Apply(NewPlan(1, 256, {1, 2, 3, 4, 5}, 0, 3, {0, 1}), &batch).ok());
  StepPlan q = p;
  q.mutable_cached_sequences(0)->set_do_sample(false);
  q.mutable_cached_sequences(0)->set_num_computed_tokens(3);
  q.set_num_sampled(1);
  EXPECT_FALSE(other.Apply(q, &batch).ok());
}

TEST(StateCacheTest, SamplingSettingsAreValidatedByTheOneRule) {
  StateCache cache(4, 8, 100);
  cache.Reset(1);
  StepBatch batch;
  StepPlan p = NewPlan(1, 1, {1, 2}, 0, 2, {0});
  p.mutable_new_sequences(0)->mutable_sampling()->set_repetition_penalty(20);  // > 10
  EXPECT_FALSE(cache.Apply(p, &batch).ok());
  p = NewPlan(1, 1, {1, 2}, 0, 2, {0});
  p.mutable_new_sequences(0)->mutable_sampling()->set_sample_index(2);  // seq 1 is sample 1
  EXPECT_FALSE(cache.Apply(p, &batch).ok());
  p = NewPlan(1, 1, {1, 2}, 0, 2, {0});
  p.mutable_new_sequences(0)->mutable_sampling()->set_temperature(0.5f);
  ASSERT_TRUE(cache.Apply(p, &batch).ok());
  EXPECT_EQ(batch.sequences[0].state->sampling.temperature, 0.5f);
  EXPECT_EQ(batch.sequences[0].state->sample_index, 1);
}

TEST(StateCacheTest, BlockCopiesChecked) {
  StateCache cache(4, 8, 100);
  cache.Reset(1);
  StepBatch batch;
  StepPlan p = NewPlan(1, 1, {1}, 0, 1, {0});
  auto* bc = p.add_block_copies();
  bc->set_src(0);
  bc->set_dst(1);
  ASSERT_TRUE(cache.Apply(p, &batch).ok());
  EXPECT_EQ(batch.block_copies.size(), 1u);
  StepPlan q;
  q.set_step_id(2);
  auto* bad = q.add_block_copies();
  bad->set_src(0);
  bad->set_dst(9);
  EXPECT_FALSE(cache.Apply(q, &batch).ok());
}

// Structured output's token masks: checked (size, a sample to apply to, at least one
// token allowed) and handed to the batch; a plan without one leaves the row unmasked.
TEST(StateCacheTest, TokenMasksAreCheckedAndReachTheBatch) {
  StateCache cache(4, 8, /*vocab_size=*/100);  // 4 words = 16 bytes
  cache.Reset(1);
  StepBatch batch;
  StepPlan wrong_size = NewPlan(1, 1, {1, 2}, 0, 2, {0});
  wrong_size.mutable_new_sequences(0)->set_allowed_tokens(std::string(13, '\xff'));
  EXPECT_FALSE(cache.Apply(wrong_size, &batch).ok());
  StepPlan none_allowed = NewPlan(1, 1, {1, 2}, 0, 2, {0});
  none_allowed.mutable_new_sequences(0)->set_allowed_tokens(std::string(16, '\0'));
  EXPECT_FALSE(cache.Apply(none_allowed, &batch).ok());
  // Only the padding bits past the vocabulary (tokens 100..127) set: allows nothing.
  std::string padding_only(16, '\0');
  padding_only[13] = padding_only[14] = padding_only[15] = '\xff';
  none_allowed.mutable_new_sequences(0)->set_allowed_tokens(padding_only);
  EXPECT_FALSE(cache.Apply(none_allowed, &batch).ok());
  StepPlan no_sample = NewPlan(1, 1, {1, 2, 3}, 0, 2, {0});
  no_sample.mutable_new_sequences(0)->set_allowed_tokens(std::string(16, '\xff'));
  EXPECT_FALSE(cache.Apply(no_sample, &batch).ok());
  EXPECT_EQ(cache.num_sequences(), 0u);

  std::string only_99(16, '\0');
  only_99[99 / 8] = static_cast<char>(1 << (99 % 8));
  StepPlan p1 = NewPlan(1, 1, {1, 2}, 0, 2, {0});
  p1.mutable_new_sequences(0)->set_allowed_tokens(only_99);
  ASSERT_TRUE(cache.Apply(p1, &batch).ok());
  EXPECT_EQ(batch.sequences[0].allowed_tokens, only_99);
  cache.AppendSampled(batch.sequences[0].state, 99);
  StepPlan p2;
  p2.set_step_id(2);
  AddCached(&p2, 1, 2, 1, true);  // no mask this step
  ASSERT_TRUE(cache.Apply(p2, &batch).ok());
  EXPECT_TRUE(batch.sequences[0].allowed_tokens.empty());
}

}  // namespace
}  // namespace weft

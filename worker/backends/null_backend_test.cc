// NullBackend: the token rule, batch validation, the one-hot logits (read by the host
// Sampler under any parameters), device sampling, and every plan operation through the
// real ModelExecutor + StateCache (new, chunked prefill, decode, fork with block copy,
// finished, preempted, logprobs on the host path).
#include "worker/backends/null_backend.h"

#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "common/gguf.h"
#include "common/plan/step_plan.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "weft/v1/worker.pb.h"
#include "worker/model/testing/tiny_llama.h"
#include "common/sampling/sampler.h"
#include "common/plan/state_cache.h"
#include "common/sampling/sampling_math.h"
#include "worker/backends/forward_stepper.h"
#include "worker/service/model_executor.h"

namespace weft {
namespace {

constexpr int32_t kVocab = 80;
constexpr int32_t kContext = 512;

struct Tiny {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> file;
};

Tiny MakeTinyFile() {
  testing::TinyLlamaSpec spec;
  spec.vocab = kVocab;
  spec.context = kContext;
  Tiny t;
  t.bytes = testing::BuildTinyLlama(spec);
  auto f = GgufFile::FromBuffer(t.bytes.data(), t.bytes.size());
  CHECK(f.ok()) << f.status();
  t.file = std::move(*f);
  return t;
}

NullBackendOptions Options() {
  NullBackendOptions o;
  o.num_kv_blocks = 32;
  o.block_size = 4;
  o.eog_token_ids = std::vector<int32_t>{5, 2};
  return o;
}

std::unique_ptr<NullBackend> Make(const Tiny& t, const NullBackendOptions& o = Options()) {
  auto b = NullBackend::Create(*t.file, o);
  CHECK(b.ok()) << b.status();
  return std::move(*b);
}

// Checks that rows [0, out.num_rows) are one-hot (0 at want[r], -inf elsewhere).
void ExpectOneHot(const ForwardOutput& out, const std::vector<int32_t>& want) {
  ASSERT_EQ(out.num_rows, static_cast<int32_t>(want.size()));
  ASSERT_EQ(out.vocab_size, kVocab);
  for (int32_t r = 0; r < out.num_rows; ++r) {
    const float* row = out.Row(r);
    for (int32_t t = 0; t < kVocab; ++t) {
      if (t == want[r]) {
        ASSERT_EQ(row[t], 0.0f) << "row " << r;
      } else {
        ASSERT_TRUE(std::isinf(row[t]) && row[t] < 0) << "row " << r << " token " << t;
      }
    }
  }
}

TEST(NullBackendTest, TokenRuleIsDeterministicAndAvoidsEndOfGeneration) {
  Tiny t = MakeTinyFile();
  auto b = Make(t);
  auto again = Make(t);
  EXPECT_EQ(b->eog_token_ids(), (std::vector<int32_t>{2, 5}));
  std::set<int32_t> seen;
  for (int32_t last = 0; last < kVocab; ++last) {
    for (int32_t pos = 0; pos < 200; ++pos) {
      const int32_t tok = b->NextToken(last, pos);
      ASSERT_GE(tok, 0);
      ASSERT_LT(tok, kVocab);
      ASSERT_NE(tok, 2);
      ASSERT_NE(tok, 5);
      ASSERT_EQ(tok, again->NextToken(last, pos));
      seen.insert(tok);
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kVocab - 2));  // every other token occurs
}

TEST(NullBackendTest, EosProbability) {
  Tiny t = MakeTinyFile();
  NullBackendOptions o = Options();
  o.eos_probability = 1;
  auto always = Make(t, o);
  EXPECT_EQ(always->NextToken(7, 3), 2);  // the smallest EOG id
  o.eos_probability = 0.25;
  auto some = Make(t, o);
  int eos = 0;
  for (int32_t pos = 0; pos < 4000; ++pos) eos += some->NextToken(11, pos) == 2;
  EXPECT_GT(eos, 800);
  EXPECT_LT(eos, 1200);
  // No EOG id known: a probability is refused.
  o.eog_token_ids = std::vector<int32_t>{};
  EXPECT_FALSE(NullBackend::Create(*t.file, o).ok());
}

TEST(NullBackendTest, OptionsAndPoolSize) {
  Tiny t = MakeTinyFile();
  NullBackendOptions o = Options();
  o.step_time = absl::Milliseconds(-1);
  EXPECT_FALSE(NullBackend::Create(*t.file, o).ok());
  o = Options();
  o.eog_token_ids = std::vector<int32_t>{kVocab};
  EXPECT_FALSE(NullBackend::Create(*t.file, o).ok());
  // Sized from the budget like the CPU backend: 2 layers x 2 (K, V) x 2 KV heads x
  // head_dim 32 x 4 slots x 2 bytes (f16) = 2048 bytes a block.
  o = Options();
  o.num_kv_blocks = 0;
  o.kv_memory_bytes = 2048 * 10 + 100;
  EXPECT_EQ(Make(t, o)->num_kv_blocks(), 10);
  EXPECT_EQ(Make(t, o)->kv_pool_bytes(), 0);
}

TEST(NullBackendTest, RejectsMalformedBatches) {
  Tiny t = MakeTinyFile();
  auto b = Make(t);
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6};
  const std::vector<int32_t> blocks = {3, 9};
  ForwardOutput out;
  auto one = [&](SequenceChunk c) {
    ForwardBatch batch;
    batch.sequences.push_back(c);
    return b->Forward(batch, &out);
  };
  SequenceChunk ok{absl::MakeConstSpan(tokens), 0, absl::MakeConstSpan(blocks), true};
  EXPECT_TRUE(one(ok).ok());
  SequenceChunk short_table = ok;
  short_table.block_table = absl::MakeConstSpan(blocks).subspan(0, 1);
  EXPECT_TRUE(absl::IsInvalidArgument(one(short_table)));
  const std::vector<int32_t> bad_blocks = {3, 32};
  SequenceChunk bad_block = ok;
  bad_block.block_table = absl::MakeConstSpan(bad_blocks);
  EXPECT_TRUE(absl::IsInvalidArgument(one(bad_block)));
  const std::vector<int32_t> bad_tokens = {1, kVocab};
  SequenceChunk bad_token = ok;
  bad_token.token_ids = absl::MakeConstSpan(bad_tokens);
  EXPECT_TRUE(absl::IsInvalidArgument(one(bad_token)));
  SequenceChunk empty = ok;
  empty.token_ids = {};
  EXPECT_TRUE(absl::IsInvalidArgument(one(empty)));
  SequenceChunk past_context = ok;
  past_context.start_pos = kContext - 2;
  EXPECT_TRUE(absl::IsInvalidArgument(one(past_context)));
  EXPECT_TRUE(absl::IsInvalidArgument(b->CopyBlock(0, 32)));
  EXPECT_TRUE(b->CopyBlock(0, 31).ok());
  EXPECT_EQ(b->num_block_copies(), 1);
}

// Many steps of changing sizes (growth past 64 rows, fewer rows, a fresh output buffer):
// the rows always hold exactly the rule's tokens, and the host Sampler draws exactly them
// under any parameters.
TEST(NullBackendTest, LogitsAreOneHotAtTheRuleAcrossSteps) {
  Tiny t = MakeTinyFile();
  auto b = Make(t);
  Sampler sampler(kVocab);
  std::vector<std::vector<int32_t>> seqs;
  for (int i = 0; i < 150; ++i) seqs.push_back({1 + i % 70, 7, (i * 13) % kVocab});
  std::vector<int32_t> table;
  for (int i = 0; i < 64; ++i) table.push_back(i % 32);
  ForwardOutput out;
  for (int step : {3, 70, 150, 10, 0, 129}) {
    SCOPED_TRACE(step);
    ForwardBatch batch;
    std::vector<int32_t> want;
    for (int i = 0; i < step; ++i) {
      const auto& s = seqs[i];
      SequenceChunk c{absl::MakeConstSpan(s), 2 + step, absl::MakeConstSpan(table),
                      /*want_logits=*/i % 3 != 1};
      batch.sequences.push_back(c);
      if (c.want_logits) want.push_back(b->NextToken(s.back(), c.start_pos + 2));
    }
    ASSERT_TRUE(b->Forward(batch, &out).ok());
    ExpectOneHot(out, want);
    SamplerParams p;
    p.temperature = 0.8f;
    p.top_k = 5;
    p.repetition_penalty = 1.3f;
    p.frequency_penalty = 0.5f;
    p.seed = 9;
    p.num_logprobs = 2;
    SampleResult r;
    for (int32_t row = 0; row < out.num_rows; ++row) {
      ASSERT_TRUE(sampler.Sample(p, absl::MakeConstSpan(out.Row(row), kVocab),
                                 absl::MakeConstSpan(seqs[0]), {}, &r).ok());
      EXPECT_EQ(r.token, want[row]);
      EXPECT_EQ(r.logprob, 0.0f);
    }
  }
  // A buffer the backend did not fill (stale values) is filled whole.
  ForwardOutput other;
  other.logits.assign(5 * kVocab, 1.0f);
  ForwardBatch batch;
  batch.sequences.push_back({absl::MakeConstSpan(seqs[0]), 0, absl::MakeConstSpan(table), true});
  ASSERT_TRUE(b->Forward(batch, &other).ok());
  ExpectOneHot(other, {b->NextToken(seqs[0].back(), 2)});
  for (int32_t r = 1; r < 5; ++r) {
    for (int32_t v = 0; v < kVocab; ++v) ASSERT_TRUE(std::isinf(other.Row(r)[v]));
  }
}

TEST(NullBackendTest, TeacherForcedRowsAndDeviceSampling) {
  Tiny t = MakeTinyFile();
  auto b = Make(t);
  const std::vector<int32_t> s = {4, 8, 15, 16, 23};
  const std::vector<int32_t> table = {6, 7};
  ForwardBatch batch;
  SequenceChunk c{absl::MakeConstSpan(s), 1, absl::MakeConstSpan(table), false};
  c.num_logits = 3;
  batch.sequences.push_back(c);
  ForwardOutput out;
  ASSERT_TRUE(b->Forward(batch, &out).ok());
  const std::vector<int32_t> want = {b->NextToken(15, 3), b->NextToken(16, 4),
                                     b->NextToken(23, 5)};
  ExpectOneHot(out, want);
  EXPECT_EQ(out.row_sequence, (std::vector<int32_t>{0, 0, 0}));

  SamplerParams p;
  std::vector<Backend::SampleRequest> reqs(2);
  reqs[0].row = 2;
  reqs[0].params = &p;
  reqs[1].row = 0;
  reqs[1].params = &p;
  std::vector<int32_t> tokens;
  ASSERT_TRUE(b->SampleOnDevice(reqs, &tokens).ok());
  EXPECT_EQ(tokens, (std::vector<int32_t>{want[2], want[0]}));
  reqs[0].row = 3;
  EXPECT_FALSE(b->SampleOnDevice(reqs, &tokens).ok());

  NullBackendOptions o = Options();
  o.device_sampling = false;
  EXPECT_TRUE(absl::IsUnimplemented(Make(t, o)->SampleOnDevice(reqs, &tokens)));
}

// --- Through the real worker path: ModelExecutor + StateCache ------------------------

weft::v1::SamplingSpec Greedy(int32_t num_logprobs = -1) {
  weft::v1::SamplingSpec s;
  s.set_temperature(0);
  s.set_top_p(1);
  s.set_repetition_penalty(1);
  s.set_seed(1);
  s.set_num_logprobs(num_logprobs);
  return s;
}

weft::v1::NewSequence* AddNew(weft::v1::StepPlan* p, int64_t seq, std::vector<int32_t> tokens,
                              int32_t computed, int32_t scheduled, std::vector<int32_t> blocks,
                              int32_t num_logprobs = -1) {
  auto* n = p->add_new_sequences();
  n->set_seq_id(seq);
  for (int32_t t : tokens) n->add_token_ids(t);
  n->set_num_prompt_tokens(static_cast<int32_t>(tokens.size()));
  n->set_num_computed_tokens(computed);
  n->set_num_scheduled_tokens(scheduled);
  for (int32_t b : blocks) n->add_block_ids(b);
  const bool sample = computed + scheduled == static_cast<int32_t>(tokens.size());
  n->set_do_sample(sample);
  *n->mutable_sampling() = Greedy(num_logprobs);
  // The plan contract: a sequence's sampling names its sample of the request (a fork's
  // is not 0).
  n->mutable_sampling()->set_sample_index(SequenceRef::FromSeqId(seq).sample_index);
  p->set_num_scheduled_tokens(p->num_scheduled_tokens() + scheduled);
  p->set_num_sampled(p->num_sampled() + sample);
  return n;
}

weft::v1::CachedSequence* AddCached(weft::v1::StepPlan* p, int64_t seq, int32_t computed,
                                    int32_t n, bool sample, std::vector<int32_t> new_blocks = {}) {
  auto* c = p->add_cached_sequences();
  c->set_seq_id(seq);
  c->set_num_computed_tokens(computed);
  c->set_num_scheduled_tokens(n);
  c->set_do_sample(sample);
  for (int32_t b : new_blocks) c->add_new_block_ids(b);
  p->set_num_scheduled_tokens(p->num_scheduled_tokens() + n);
  p->set_num_sampled(p->num_sampled() + sample);
  return c;
}

TEST(NullBackendTest, ExecutesEveryPlanOperationThroughTheStateCache) {
  Tiny t = MakeTinyFile();
  NullBackendOptions o = Options();
  o.step_time = absl::Milliseconds(10);
  auto backend = Make(t, o);
  NullBackend* nb = backend.get();
  auto exec = ModelExecutor::Create(*t.file, std::move(backend), ModelExecutorOptions{});
  ASSERT_TRUE(exec.ok()) << exec.status();
  ModelExecutor& e = **exec;
  EXPECT_EQ(e.Hello().backend(), "null");
  EXPECT_EQ(e.Hello().num_kv_blocks(), 32);
  weft::v1::Welcome w;
  w.set_replica("r0");
  w.set_num_kv_blocks(32);
  w.set_first_step_id(1);
  ASSERT_TRUE(e.OnWelcome(w).ok());

  // Step 1: seq 256 prefills its first chunk (no sample); seq 512 (logprobs wanted: the
  // host path) its whole prompt; seq 768 whole prompt and a fork 769 of it.
  weft::v1::StepPlan p1;
  p1.set_step_id(1);
  AddNew(&p1, 256, {10, 11, 12, 13, 14, 15}, 0, 4, {1});
  AddNew(&p1, 512, {20, 21, 22}, 0, 3, {2}, /*num_logprobs=*/1);
  AddNew(&p1, 768, {30, 31, 32, 33, 34}, 0, 5, {3, 4});
  auto* fork = AddNew(&p1, 769, {30, 31, 32, 33, 34}, 5, 0, {3, 5});
  fork->set_fork_parent_seq_id(768);
  auto* copy = p1.add_block_copies();
  copy->set_src(4);
  copy->set_dst(5);
  weft::v1::StepResult r1 = e.Execute(p1);
  ASSERT_EQ(r1.error(), "");
  ASSERT_EQ(r1.tokens_size(), 3);
  const int32_t t512 = nb->NextToken(22, 2);
  const int32_t t768 = nb->NextToken(34, 4);
  EXPECT_EQ(r1.tokens(0).seq_id(), 512);
  EXPECT_EQ(r1.tokens(0).token_id(), t512);
  EXPECT_EQ(r1.tokens(0).logprob(), 0.0f);
  EXPECT_EQ(r1.tokens(1).token_id(), t768);
  EXPECT_EQ(r1.tokens(2).seq_id(), 769);
  EXPECT_EQ(r1.tokens(2).token_id(), t768);  // a fork samples its parent's row
  EXPECT_EQ(nb->num_block_copies(), 1);
  EXPECT_GE(r1.forward_seconds(), 0.009);  // slept to the step time
  EXPECT_GE(r1.execute_seconds(), r1.forward_seconds());

  // Step 2: 256 finishes its prompt (a new block), 512 and 768 decode their own
  // samples, 769 is preempted.
  weft::v1::StepPlan p2;
  p2.set_step_id(2);
  p2.add_preempted_seq_ids(769);
  AddCached(&p2, 256, 4, 2, true, {6});
  AddCached(&p2, 512, 3, 1, true, {7});
  AddCached(&p2, 768, 5, 1, true);
  // Steps 2 and 3 reuse one result, as the worker loop does (ExecuteInto): nothing of
  // the step before stays in it (step 1's first entry had logprobs and a top list).
  ASSERT_GT(r1.tokens(0).top_size(), 0);
  weft::v1::StepResult reused = r1;
  e.ExecuteInto(p2, &reused);
  const weft::v1::StepResult& r2 = reused;
  ASSERT_EQ(r2.error(), "");
  EXPECT_EQ(r2.step_id(), 2);
  ASSERT_EQ(r2.tokens_size(), 3);
  EXPECT_EQ(r2.tokens(0).seq_id(), 256);
  EXPECT_EQ(r2.tokens(0).top_size(), 0);
  const int32_t t256 = nb->NextToken(15, 5);
  EXPECT_EQ(r2.tokens(0).token_id(), t256);
  EXPECT_EQ(r2.tokens(1).token_id(), nb->NextToken(t512, 3));
  EXPECT_EQ(r2.tokens(2).token_id(), nb->NextToken(t768, 5));

  // Step 3: 512 finished; 256 decodes; 769 must be gone (a cached entry for it fails).
  weft::v1::StepPlan p3;
  p3.set_step_id(3);
  p3.add_finished_seq_ids(512);
  AddCached(&p3, 256, 6, 1, true);
  e.ExecuteInto(p3, &reused);
  const weft::v1::StepResult& r3 = reused;
  ASSERT_EQ(r3.error(), "");
  EXPECT_EQ(r3.step_id(), 3);
  ASSERT_EQ(r3.tokens_size(), 1);
  EXPECT_EQ(r3.tokens(0).token_id(), nb->NextToken(t256, 6));
  weft::v1::StepPlan p4;
  p4.set_step_id(4);
  AddCached(&p4, 769, 5, 1, true);
  EXPECT_NE(e.Execute(p4).error(), "");
  EXPECT_EQ(nb->num_forwards(), 3);
}

// Step (tokens from the batch, no logits) gives exactly what the generic path gives —
// ForwardStepper over Forward's one-hot logits, SampleOnDevice and the host Sampler —
// over plans with a chunked prefill, logprobs, a fork with its block copy and decodes;
// with device sampling the generic path sends only the entries without logprobs to the
// device (one logprobs request no longer moves the whole batch to the host).
TEST(NullBackendTest, StepEqualsForwardThenSamplingOnEitherPath) {
  Tiny t = MakeTinyFile();
  for (const bool device : {true, false}) {
    SCOPED_TRACE(device ? "device sampling" : "host sampling");
    NullBackendOptions o = Options();
    o.device_sampling = device;
    auto direct = Make(t, o);
    auto generic = Make(t, o);
    ForwardStepper stepper(kVocab);
    StateCache a(o.block_size, o.num_kv_blocks, kVocab, kContext);
    StateCache b(o.block_size, o.num_kv_blocks, kVocab, kContext);
    a.Reset(1);
    b.Reset(1);
    std::vector<weft::v1::StepPlan> plans(3);
    plans[0].set_step_id(1);
    AddNew(&plans[0], 256, {10, 11, 12, 13, 14, 15}, 0, 4, {1});
    AddNew(&plans[0], 512, {20, 21, 22}, 0, 3, {2}, /*num_logprobs=*/2);
    AddNew(&plans[0], 768, {30, 31, 32, 33, 34}, 0, 5, {3, 4});
    AddNew(&plans[0], 769, {30, 31, 32, 33, 34}, 5, 0, {3, 5})->set_fork_parent_seq_id(768);
    auto* copy = plans[0].add_block_copies();
    copy->set_src(4);
    copy->set_dst(5);
    plans[1].set_step_id(2);
    AddCached(&plans[1], 256, 4, 2, true, {6});
    AddCached(&plans[1], 512, 3, 1, true, {7});
    AddCached(&plans[1], 768, 5, 1, true);
    AddCached(&plans[1], 769, 5, 1, true);
    plans[2].set_step_id(3);
    int64_t sampled_without_logprobs = 0;
    for (weft::v1::StepPlan& plan : plans) {
      if (plan.step_id() == 3) {  // every sequence decodes its own last sample
        for (int64_t seq : {256, 512, 768, 769}) {
          const WorkerSequence* s = a.Find(seq);
          ASSERT_NE(s, nullptr);
          AddCached(&plan, seq, static_cast<int32_t>(s->tokens.size()) - 1, 1, true);
        }
      }
      StepBatch ba, bb;
      ASSERT_TRUE(a.Apply(plan, &ba).ok()) << plan.step_id();
      ASSERT_TRUE(b.Apply(plan, &bb).ok()) << plan.step_id();
      StepOutput oa, ob;
      ASSERT_TRUE(direct->Step(ba, &oa).ok());
      ASSERT_TRUE(stepper.Step(*generic, bb, &ob).ok());
      ASSERT_EQ(oa.num_samples, ba.num_sampled);
      ASSERT_EQ(ob.num_samples, oa.num_samples);
      int32_t k = 0;
      for (size_t i = 0; i < ba.sequences.size(); ++i) {
        if (!ba.sequences[i].sample) continue;
        const SampleResult& x = oa.samples[k];
        const SampleResult& y = ob.samples[k];
        ++k;
        EXPECT_EQ(x.token, y.token) << "step " << plan.step_id() << " entry " << i;
        EXPECT_EQ(x.logprob, y.logprob);
        ASSERT_EQ(x.top_logprobs.size(), y.top_logprobs.size());
        const bool logprobs = ba.sequences[i].state->sampling.num_logprobs >= 0;
        EXPECT_EQ(x.top_logprobs.empty(), !logprobs);
        for (size_t j = 0; j < x.top_logprobs.size(); ++j) {
          EXPECT_EQ(x.top_logprobs[j].token, y.top_logprobs[j].token);
          EXPECT_EQ(x.top_logprobs[j].logprob, y.top_logprobs[j].logprob);
        }
        sampled_without_logprobs += !logprobs;
        a.AppendSampled(ba.sequences[i].state, x.token);
        b.AppendSampled(bb.sequences[i].state, y.token);
      }
    }
    EXPECT_EQ(generic->num_device_samples(), device ? sampled_without_logprobs : 0);
    EXPECT_EQ(direct->num_device_samples(), 0);  // Step never goes through it
    EXPECT_EQ(direct->num_block_copies(), 1);
    EXPECT_EQ(direct->num_rows(), generic->num_rows());
  }
}

// A constrained row (the plan's bit-packed mask) gets an allowed token on either sampling
// path: the rule's token when the mask allows it, else the next allowed one.
TEST(NullBackendTest, StepAnswersAConstrainedRowWithAnAllowedToken) {
  Tiny t = MakeTinyFile();
  for (const bool device : {true, false}) {
    SCOPED_TRACE(device ? "device sampling" : "host sampling");
    NullBackendOptions o = Options();
    o.device_sampling = device;
    auto backend = Make(t, o);
    StateCache cache(o.block_size, o.num_kv_blocks, kVocab, kContext);
    cache.Reset(1);
    const int32_t rule = backend->NextToken(13, 3);
    auto only = [&](std::vector<int32_t> allowed) {
      std::string mask(sampling::MaskBytes(kVocab), '\0');
      for (int32_t a : allowed) mask[a / 8] = static_cast<char>(mask[a / 8] | (1 << (a % 8)));
      return mask;
    };
    const int32_t other = (rule + 7) % kVocab == 5 || (rule + 7) % kVocab == 2 ? (rule + 9) % kVocab
                                                                                : (rule + 7) % kVocab;
    weft::v1::StepPlan plan;
    plan.set_step_id(1);
    AddNew(&plan, 1, {10, 11, 12, 13}, 0, 4, {1})->set_allowed_tokens(only({other}));
    AddNew(&plan, 2, {10, 11, 12, 13}, 0, 4, {2})->set_allowed_tokens(only({rule, other}));
    AddNew(&plan, 3, {10, 11, 12, 13}, 0, 4, {3});
    StepBatch batch;
    ASSERT_TRUE(cache.Apply(plan, &batch).ok());
    StepOutput out;
    ASSERT_TRUE(backend->Step(batch, &out).ok());
    ASSERT_EQ(out.num_samples, 3);
    EXPECT_EQ(out.samples[0].token, other);
    EXPECT_EQ(out.samples[1].token, rule);
    EXPECT_EQ(out.samples[2].token, rule);
  }
}

}  // namespace
}  // namespace weft

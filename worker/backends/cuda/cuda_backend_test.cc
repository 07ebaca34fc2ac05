// CudaBackend against CpuBackend (GPU tests, skipped without a device), on random tiny
// models (head_dim 64, 128 and 256, GQA, BF16 / Q4_1 / Q8_0 weights, tied and untied heads,
// every KV dtype; llama, qwen2 with QKV biases, qwen3 with QK norms, gemma3 with post-norms,
// GELU, a 24-token sliding window and soft-capping — the architectures of
// common/model_config.h): the same plans — whole and chunked prefills, decode steps run as
// CUDA graphs and eagerly, mixed batches, copy-on-write — give the same logits up to the
// CUDA backend's bf16 tolerance. Malformed batches fail with InvalidArgument before any
// work. With --graph_mixed_steps, steps with prefill chunks run as piecewise graphs and
// match the eager path. Backend::Step samples on the device (every config, a fork,
// logprobs, penalties' counts kept on the device across steps) as the host Sampler does on
// the same step's logits. The kernel choices, graph launch counts, the state kept between
// steps and the default model: cuda_backend_graph_test.cc (the same test binary).
#include "worker/backends/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <memory>
#include <vector>

#include "common/gguf.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_status.h"
#include "common/plan/state_cache.h"
#include "common/sampling/sampler.h"
#include "worker/backends/cpu_backend.h"
#include "worker/backends/testing/step_driver.h"
#include "worker/model/testing/tiny_llama.h"
#include "worker/backends/cuda/cuda_backend_test_util.h"

namespace weft {
namespace {

using namespace ::weft::cuda_test;  // NOLINT: the tests' shared helpers

struct ModelCase {
  GgmlType type;
  int32_t hidden, heads, kv_heads;
  bool tied;
  kc::KvDtype kv;
  const char* architecture = "llama";
};

class CudaBackendTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  // mixed: piecewise graphs on (--graph_mixed_steps) with decode graphs up to 2
  // sequences and piecewise ones up to 64 tokens.
  std::unique_ptr<Pair> Make(bool graphs = true, bool mixed = false) {
    const ModelCase c = GetParam();
    testing::TinyLlamaSpec spec;
    spec.matrix_type = c.type;
    spec.hidden = c.hidden;
    spec.num_heads = c.heads;
    spec.num_kv_heads = c.kv_heads;
    spec.ffn = 160;
    spec.vocab = 96;
    spec.tied = c.tied;
    spec.architecture = c.architecture;
    if (spec.architecture == "gemma3") {
      spec.num_layers = 3;
      spec.sliding_window = 24;  // cut by the 40- and 290-token prompts below
      spec.swa_pattern = 3;
      spec.final_logit_softcap = 30.0f;
    }
    CudaBackendOptions o;
    o.kv_dtype = c.kv;
    o.cuda_graphs = graphs;
    o.graph_mixed_steps = mixed;
    if (mixed) {
      o.max_graph_batch = 2;
      o.max_graph_tokens = 64;
    }
    return MakePair(spec, o);
  }
  // int8 KV adds its own rounding on top of bf16.
  double Tol() const { return GetParam().kv == kc::KvDtype::kInt8 ? 0.06 : 0.03; }
};

TEST_P(CudaBackendTest, PrefillThenDecodeMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  std::unique_ptr<Pair> p = Make();
  ASSERT_NE(p, nullptr);
  // Three sequences: a prompt prefilled whole, one in chunks (boundary mid-block and on a
  // block edge), one prompt of a single token.
  Seq a = MakeSeq(40, 96, 1), b = MakeSeq(37, 96, 2), c = MakeSeq(1, 96, 3);
  a.table = {0, 9, 2, 3};  // non-contiguous
  b.table = {8, 1, 10, 11};
  c.table = {16, 17};
  {
    ForwardBatch batch;
    batch.sequences = {Chunk(a, 0, 40, true), Chunk(b, 0, 13, false), Chunk(c, 0, 1, true)};
    Step(p.get(), batch, Tol());
  }
  {
    ForwardBatch batch;
    batch.sequences = {Chunk(b, 13, 3, false)};
    Step(p.get(), batch, Tol());
  }
  {
    ForwardBatch batch;
    batch.sequences = {Chunk(b, 16, 21, true)};
    Step(p.get(), batch, Tol());
  }
  // Decode steps (graph mode: all chunks are one token) with growing contexts.
  for (int32_t step = 0; step < 6; ++step) {
    for (Seq* s : {&a, &b, &c}) s->tokens.push_back((step * 7 + 3) % 96);
    ForwardBatch batch;
    batch.sequences = {Chunk(a, static_cast<int32_t>(a.tokens.size()) - 1, 1, true),
                       Chunk(b, static_cast<int32_t>(b.tokens.size()) - 1, 1, true),
                       Chunk(c, static_cast<int32_t>(c.tokens.size()) - 1, 1, true)};
    Step(p.get(), batch, Tol());
  }
  EXPECT_EQ(p->gpu->graph_captures(), 1);  // bucket 4, captured once
  EXPECT_EQ(p->gpu->graph_replays(), 6);
  // A mixed batch (decode + prefill chunk) runs eagerly.
  Seq d = MakeSeq(20, 96, 4);
  d.table = {40, 41};
  a.tokens.push_back(5);
  ForwardBatch mixed;
  mixed.sequences = {Chunk(d, 0, 20, true),
                     Chunk(a, static_cast<int32_t>(a.tokens.size()) - 1, 1, true)};
  Step(p.get(), mixed, Tol());
  EXPECT_EQ(p->gpu->graph_replays(), 6);
}

// A prompt of >= 128 tokens runs its attention on the tensor-core kernel (a chunk of 150,
// then one of 140 after it: a cached prefix), a short one beside it on the CUDA-core
// kernel in the same step; decodes follow.
TEST_P(CudaBackendTest, LongPromptsOnTensorCoresMatchCpu) {
  SKIP_WITHOUT_CUDA();
  std::unique_ptr<Pair> p = Make();
  ASSERT_NE(p, nullptr);
  Seq a = MakeSeq(290, 96, 11), b = MakeSeq(30, 96, 12);
  for (int32_t i = 0; i < 19; ++i) a.table.push_back(63 - i);  // 304 slots, scattered
  b.table = {20, 21};
  {
    ForwardBatch batch;
    batch.sequences = {Chunk(a, 0, 150, true), Chunk(b, 0, 30, true)};
    Step(p.get(), batch, Tol());
  }
  {
    ForwardBatch batch;
    batch.sequences = {Chunk(a, 150, 140, true)};
    Step(p.get(), batch, Tol());
  }
  for (int32_t step = 0; step < 3; ++step) {
    a.tokens.push_back(step + 1);
    ForwardBatch batch;
    batch.sequences = {Chunk(a, static_cast<int32_t>(a.tokens.size()) - 1, 1, true)};
    Step(p.get(), batch, Tol());
  }
}

TEST_P(CudaBackendTest, GraphsAndEagerAgree) {
  SKIP_WITHOUT_CUDA();
  std::unique_ptr<Pair> g = Make(true), e = Make(false);
  ASSERT_NE(g, nullptr);
  ASSERT_NE(e, nullptr);
  Seq s = MakeSeq(30, 96, 9);
  s.table = {3, 7};
  ForwardBatch prefill;
  prefill.sequences = {Chunk(s, 0, 29, false)};
  ForwardOutput og, oe;
  ASSERT_TRUE(g->gpu->Forward(prefill, &og).ok());
  ASSERT_TRUE(e->gpu->Forward(prefill, &oe).ok());
  ForwardBatch decode;
  decode.sequences = {Chunk(s, 29, 1, true)};
  ASSERT_TRUE(g->gpu->Forward(decode, &og).ok());
  ASSERT_TRUE(e->gpu->Forward(decode, &oe).ok());
  EXPECT_EQ(g->gpu->graph_replays(), 1);
  EXPECT_EQ(e->gpu->graph_replays(), 0);
  ExpectClose(og, oe, 1e-3);  // split sizes differ (graph: the model's context length)
}

// Rows whose eager logits have a clear winner (a margin over twice the tolerance) have
// the same greedy token on both paths.
void ExpectSameGreedy(const ForwardOutput& a, const ForwardOutput& eager, double tol) {
  for (int32_t r = 0; r < eager.num_rows; ++r) {
    const float* e = eager.Row(r);
    const float* g = a.Row(r);
    const int32_t best = static_cast<int32_t>(std::max_element(e, e + eager.vocab_size) - e);
    double scale = 1e-3, second = -1e30;
    for (int32_t v = 0; v < eager.vocab_size; ++v) {
      scale = std::max(scale, double{std::fabs(e[v])});
      if (v != best) second = std::max(second, double{e[v]});
    }
    if (e[best] - second <= 2 * tol * scale) continue;  // a near tie: rounding may flip it
    EXPECT_EQ(std::max_element(g, g + a.vocab_size) - g, best) << "row " << r;
  }
}

// --graph_mixed_steps: steps with prefill chunks, and decode batches over max_graph_batch
// (2 here), run as piecewise graphs (everything but attention captured per token bucket,
// up to 64 tokens here) and give the eager path's logits — and the CPU reference's — to
// the backend's tolerance, and its greedy tokens; the coverage counters count each
// step's kind, and pieces are captured once per bucket, reused by later steps of other
// chunk layouts, and captured again after a buffer growth dropped them.
TEST_P(CudaBackendTest, PiecewiseGraphsMatchEager) {
  SKIP_WITHOUT_CUDA();
  std::unique_ptr<Pair> g = Make(true, /*mixed=*/true), e = Make(false);
  ASSERT_NE(g, nullptr);
  ASSERT_NE(e, nullptr);
  const int64_t pieces = GetParam().architecture == std::string("gemma3") ? 4 : 3;  // L + 1
  Seq a = MakeSeq(40, 96, 21), b = MakeSeq(40, 96, 22), c = MakeSeq(40, 96, 23),
      d = MakeSeq(50, 96, 24), f = MakeSeq(80, 96, 25);
  a.table = {0, 1, 2};
  b.table = {5, 4, 3};
  c.table = {6, 7, 8};
  d.table = {12, 9, 11, 10};
  f.table = {13, 14, 15, 16, 17};
  enum Kind { kDecodeGraph, kPiecewise, kEager };
  int32_t step = 0;
  auto run = [&](std::vector<SequenceChunk> chunks, Kind kind, int64_t captures) {
    SCOPED_TRACE(::testing::Message() << "step " << ++step);
    ForwardBatch batch;
    batch.sequences = std::move(chunks);
    const Backend::GraphStepCounts before = g->gpu->graph_steps();
    const int64_t captured = g->gpu->piece_captures();
    ForwardOutput og, oe, oc;
    const absl::Status sg = g->gpu->Forward(batch, &og);
    ASSERT_TRUE(sg.ok()) << sg;
    ASSERT_TRUE(e->gpu->Forward(batch, &oe).ok());
    ASSERT_TRUE(g->cpu->Forward(batch, &oc).ok());
    ExpectClose(og, oe, Tol());
    ExpectClose(og, oc, Tol());
    ExpectSameGreedy(og, oe, Tol());
    const Backend::GraphStepCounts after = g->gpu->graph_steps();
    EXPECT_EQ(after.decode_graph - before.decode_graph, kind == kDecodeGraph ? 1 : 0);
    EXPECT_EQ(after.piecewise - before.piecewise, kind == kPiecewise ? 1 : 0);
    EXPECT_EQ(after.eager - before.eager, kind == kEager ? 1 : 0);
    EXPECT_EQ(g->gpu->piece_captures() - captured, captures);
  };
  // Prefill only, 31 tokens, 4 logits rows: token bucket 32, row bucket 4 (the largest
  // shapes of the first phase: no buffer grows until the 64-token step).
  run({Chunk(a, 0, 12, true), Chunk(b, 0, 10, true), Chunk(c, 0, 6, true), Chunk(d, 0, 3, true)},
      kPiecewise, pieces);
  // Mixed: a decode beside two prefill chunks, 14 tokens (bucket 16), 2 rows.
  run({Chunk(a, 12, 1, true), Chunk(b, 10, 10, false), Chunk(c, 6, 3, true)}, kPiecewise,
      pieces);
  // Bucket (32, 4) again, other chunks (two decodes among them): every piece replayed.
  run({Chunk(a, 13, 17, true), Chunk(b, 20, 1, true), Chunk(c, 9, 1, true), Chunk(d, 3, 5, true)},
      kPiecewise, 0);
  // Three decodes (over max_graph_batch): bucket 16 again, a new row bucket (4): only the
  // last piece is captured.
  run({Chunk(a, 30, 1, true), Chunk(b, 21, 1, true), Chunk(c, 10, 1, true)}, kPiecewise, 1);
  // Two decodes: a decode graph.
  run({Chunk(a, 31, 1, true), Chunk(b, 22, 1, true)}, kDecodeGraph, 0);
  EXPECT_EQ(g->gpu->graph_replays(), 1);
  // 50 tokens: bucket 64, the activation buffers grow (every graph is dropped).
  run({Chunk(d, 8, 40, true), Chunk(f, 0, 10, true)}, kPiecewise, pieces);
  // Bucket (16, 2) again: captured again after the drop.
  run({Chunk(a, 32, 1, true), Chunk(c, 11, 9, true)}, kPiecewise, pieces);
  // 70 tokens, over max_graph_tokens: eager.
  run({Chunk(f, 10, 70, true)}, kEager, 0);
  // Decodes after all that: a decode graph again (captured anew), then piecewise.
  run({Chunk(a, 33, 1, true), Chunk(b, 23, 1, true)}, kDecodeGraph, 0);
  run({Chunk(a, 34, 1, true), Chunk(b, 24, 1, true), Chunk(c, 20, 1, true)}, kPiecewise,
      pieces);
  EXPECT_EQ(g->gpu->graph_captures(), 2);
  const Backend::GraphStepCounts eager_only = e->gpu->graph_steps();
  EXPECT_EQ(eager_only.eager, step);
  EXPECT_EQ(eager_only.decode_graph + eager_only.piecewise, 0);
}

TEST_P(CudaBackendTest, CopyOnWriteForkDecodesLikeItsParent) {
  SKIP_WITHOUT_CUDA();
  std::unique_ptr<Pair> p = Make();
  ASSERT_NE(p, nullptr);
  Seq parent = MakeSeq(21, 96, 5);
  parent.table = {10, 11};
  ForwardBatch prefill;
  prefill.sequences = {Chunk(parent, 0, 21, true)};
  Step(p.get(), prefill, Tol());
  // The child shares block 10 and gets a copy of the partial block 11 as block 12.
  ASSERT_TRUE(p->gpu->CopyBlock(11, 12).ok());
  ASSERT_TRUE(p->cpu->CopyBlock(11, 12).ok());
  Seq child = parent;
  child.table = {10, 12};
  parent.tokens.push_back(7);
  child.tokens.push_back(7);
  ForwardBatch decode;
  decode.sequences = {Chunk(parent, 21, 1, true), Chunk(child, 21, 1, true)};
  ForwardOutput out;
  ASSERT_TRUE(p->gpu->Forward(decode, &out).ok());
  ASSERT_EQ(out.num_rows, 2);
  for (int32_t v = 0; v < out.vocab_size; ++v) ASSERT_EQ(out.Row(0)[v], out.Row(1)[v]) << v;
  ForwardOutput cpu;
  ASSERT_TRUE(p->cpu->Forward(decode, &cpu).ok());
  ExpectClose(out, cpu, Tol());
  EXPECT_EQ(p->gpu->CopyBlock(0, 64).code(), absl::StatusCode::kOutOfRange);
}

TEST_P(CudaBackendTest, MalformedBatchIsInvalidArgument) {
  SKIP_WITHOUT_CUDA();
  std::unique_ptr<Pair> p = Make();
  ASSERT_NE(p, nullptr);
  Seq s = MakeSeq(20, 96, 6);
  s.table = {1};  // too short for 20 tokens
  ForwardBatch batch;
  batch.sequences = {Chunk(s, 0, 20, true)};
  ForwardOutput out;
  EXPECT_EQ(p->gpu->Forward(batch, &out).code(), absl::StatusCode::kInvalidArgument);
  s.table = {1, 2};
  s.tokens[3] = 96;  // outside the vocabulary
  batch.sequences = {Chunk(s, 0, 20, true)};
  EXPECT_EQ(p->gpu->Forward(batch, &out).code(), absl::StatusCode::kInvalidArgument);
}


// Steps `plan` on the GPU after Forward of the same chunks (the same batch shape, so the
// same logits) and checks every sample against the host Sampler on those logits: tokens
// equal, logprobs (on the device, copied back rows x N) to rounding.
void StepLikeHost(CudaBackend* gpu, testing::StepDriver* d, const StepPlan& plan) {
  const ForwardBatch& fb = d->Apply(plan);
  ASSERT_EQ(d->cache().next_step_id(), plan.step_id() + 1) << "plan rejected";
  ForwardOutput logits;
  ASSERT_TRUE(gpu->Forward(fb, &logits).ok());
  std::vector<SampleResult> want;
  std::vector<int32_t> chunk_row(d->batch().sequences.size(), -1);
  int32_t row = 0;
  for (size_t i = 0; i < d->batch().sequences.size(); ++i) {
    if (d->batch().sequences[i].num_tokens > 0 && d->batch().sequences[i].sample) chunk_row[i] = row++;
  }
  for (size_t i = 0; i < d->batch().sequences.size(); ++i) {
    const ScheduledSequence& sc = d->batch().sequences[i];
    if (!sc.sample) continue;
    want.push_back(HostSample(*d, logits, i, chunk_row[sc.logits_from >= 0 ? sc.logits_from : i]));
  }
  StepOutput out;
  const int64_t d2h = gpu->device_to_host_bytes();
  const absl::Status s = d->StepApplied(&out);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(out.num_samples, static_cast<int32_t>(want.size()));
  for (size_t k = 0; k < want.size(); ++k) {
    const SampleResult& got = out.samples[k];
    EXPECT_EQ(got.token, want[k].token) << "sample " << k;
    EXPECT_NEAR(got.logprob, want[k].logprob, 1e-5 * (1 + std::fabs(want[k].logprob)));
    ASSERT_EQ(got.top_logprobs.size(), want[k].top_logprobs.size());
    for (size_t j = 0; j < got.top_logprobs.size(); ++j) {
      EXPECT_EQ(got.top_logprobs[j].token, want[k].top_logprobs[j].token);
      EXPECT_NEAR(got.top_logprobs[j].logprob, want[k].top_logprobs[j].logprob, 1e-5);
    }
  }
  // Tokens and logprobs only (a token, a logprob and at most 5 top entries of 8 bytes a
  // row, plus the blob's 16-byte alignment of 4 arrays), never rows x vocab.
  const int64_t copied = gpu->device_to_host_bytes() - d2h;
  EXPECT_GT(copied, 0);
  EXPECT_LE(copied, 64 + static_cast<int64_t>(want.size()) * (4 + 4 + 5 * 8));
}

// Backend::Step samples on the device with every config the host Sampler takes, a fork
// sampling its parent's row, and logprobs: equal to the host Sampler over a prefill and
// three decode steps (the penalties' counts kept on the device between them), then a
// finished sequence's slot taken by a new one.
TEST_P(CudaBackendTest, StepSamplesOnTheDeviceLikeTheHostSampler) {
  SKIP_WITHOUT_CUDA();
  std::unique_ptr<Pair> p = Make();
  ASSERT_NE(p, nullptr);
  std::vector<SamplingConfig> params(6);
  params[0].temperature = 0, params[0].num_logprobs = 3;
  params[1].seed = 11;
  params[2].top_k = 5, params[2].temperature = 0.7f, params[2].seed = 12;
  params[2].num_logprobs = 0;
  params[3].top_p = 0.8f, params[3].seed = 13;
  params[4].min_p = 0.1f, params[4].repetition_penalty = 1.2f, params[4].seed = 14;
  params[5].presence_penalty = 0.5f, params[5].frequency_penalty = 0.3f, params[5].seed = 15;
  params[5].num_logprobs = 5;
  testing::StepDriver d(p->gpu.get());
  StepPlan plan = d.Plan();
  std::vector<std::vector<int32_t>> tokens;
  for (int32_t i = 0; i < 5; ++i) {
    tokens.push_back(MakeSeq(9 + 5 * i, 96, 7 + i).tokens);
    const int32_t n = static_cast<int32_t>(tokens[i].size());
    d.AddNew(&plan, SeqId(i + 1), tokens[i], n - 4, {20 + 4 * i, 21 + 4 * i, 22 + 4 * i}, params[i]);
  }
  // A fork of request 1 (sample 1): samples from its parent's row with its own settings.
  d.AddNew(&plan, SeqId(1, 1), tokens[0], static_cast<int32_t>(tokens[0].size()) - 4,
           {40, 41, 42}, params[5], static_cast<int32_t>(tokens[0].size()), SeqId(1));
  ASSERT_NO_FATAL_FAILURE(StepLikeHost(p->gpu.get(), &d, plan));
  for (int step = 0; step < 3; ++step) {
    plan = d.Plan();
    for (int32_t i = 0; i < 5; ++i) d.AddDecode(&plan, SeqId(i + 1));
    ASSERT_NO_FATAL_FAILURE(StepLikeHost(p->gpu.get(), &d, plan));
  }
  plan = d.Plan();
  plan.add_finished_seq_ids(SeqId(2));
  d.AddNew(&plan, SeqId(6), tokens[1], 5, {50, 51, 52}, params[4]);
  for (int32_t i : {0, 2, 3, 4}) d.AddDecode(&plan, SeqId(i + 1));
  ASSERT_NO_FATAL_FAILURE(StepLikeHost(p->gpu.get(), &d, plan));
}


INSTANTIATE_TEST_SUITE_P(
    Models, CudaBackendTest,
    ::testing::Values(ModelCase{GgmlType::kBF16, 256, 4, 2, false, kc::KvDtype::kBf16},
                      ModelCase{GgmlType::kQ4_1, 384, 6, 2, true, kc::KvDtype::kBf16},
                      ModelCase{GgmlType::kQ8_0, 512, 4, 4, false, kc::KvDtype::kF16},
                      ModelCase{GgmlType::kQ4_0, 384, 6, 2, true, kc::KvDtype::kInt8},
                      ModelCase{GgmlType::kBF16, 512, 8, 1, false, kc::KvDtype::kBf16},
                      ModelCase{GgmlType::kQ8_0, 256, 4, 2, true, kc::KvDtype::kBf16, "qwen2"},
                      ModelCase{GgmlType::kQ4_1, 256, 4, 2, false, kc::KvDtype::kF16, "qwen3"},
                      ModelCase{GgmlType::kQ8_0, 512, 2, 1, true, kc::KvDtype::kBf16, "gemma3"},
                      ModelCase{GgmlType::kQ4_0, 512, 2, 1, true, kc::KvDtype::kInt8,
                                "gemma3"}));

}  // namespace
}  // namespace weft

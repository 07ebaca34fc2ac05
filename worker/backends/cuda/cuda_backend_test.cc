// CudaBackend against CpuBackend (GPU tests, skipped without a device): the same
// plans — whole and chunked prefills, decode steps run as CUDA graphs and eagerly,
// mixed batches, copy-on-write — give the same logits up to the CUDA backend's
// bf16 tolerance, on random tiny models (head_dim 64, 128 and 256, GQA, BF16 / Q4_1 / Q8_0
// weights, tied and untied heads, every KV dtype; llama, qwen2 with QKV biases, qwen3 with
// QK norms, gemma3 with post-norms, GELU, a 24-token sliding window and soft-capping —
// the architectures of common/model_config.h), and on the default model when
// models/ has it. Malformed batches fail with InvalidArgument before any work. A greedy
// request gives the same tokens before and after a load of mixed batch shapes (state
// kept between steps must not leak into later ones). Backend::Step samples on the device
// (every config, a fork, logprobs, penalties' counts kept on the device across steps) as
// the host Sampler does on the same step's logits. With --graph_mixed_steps, steps with
// prefill chunks run as piecewise graphs and match the eager path.
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

namespace weft {
namespace {

namespace kc = ::weft::kernels::cuda;

#define SKIP_WITHOUT_CUDA()                                                       \
  do {                                                                            \
    if (kc::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";             \
  } while (0)

struct Pair {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<CpuBackend> cpu;
  std::unique_ptr<CudaBackend> gpu;
};

std::unique_ptr<Pair> MakePair(const testing::TinyLlamaSpec& spec, CudaBackendOptions o) {
  auto p = std::make_unique<Pair>();
  p->bytes = testing::BuildTinyLlama(spec);
  auto file = GgufFile::FromBuffer(p->bytes.data(), p->bytes.size());
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return nullptr;
  p->file = std::move(*file);
  CpuBackendOptions co;
  co.model.kernels = KernelChoice::kReference;
  co.model.kv_dtype = KvDtype::kF32;  // the exact reference
  co.model.num_threads = 2;
  co.num_kv_blocks = 64;
  auto cpu = CpuBackend::Create(*p->file, co);
  EXPECT_TRUE(cpu.ok()) << cpu.status();
  o.num_kv_blocks = 64;
  auto gpu = CudaBackend::Create(*p->file, o);
  EXPECT_TRUE(gpu.ok()) << gpu.status();
  if (!cpu.ok() || !gpu.ok()) return nullptr;
  p->cpu = std::move(*cpu);
  p->gpu = std::move(*gpu);
  return p;
}

// |a - b| <= tol * max|b| over the row: logits agree to the bf16 path's precision.
void ExpectClose(const ForwardOutput& gpu, const ForwardOutput& cpu, double tol) {
  ASSERT_EQ(gpu.num_rows, cpu.num_rows);
  ASSERT_EQ(gpu.vocab_size, cpu.vocab_size);
  for (int32_t r = 0; r < cpu.num_rows; ++r) {
    EXPECT_EQ(gpu.row_sequence[r], cpu.row_sequence[r]);
    double scale = 1e-3, worst = 0;
    for (int32_t v = 0; v < cpu.vocab_size; ++v) {
      scale = std::max(scale, double{std::fabs(cpu.Row(r)[v])});
    }
    for (int32_t v = 0; v < cpu.vocab_size; ++v) {
      ASSERT_FALSE(std::isnan(gpu.Row(r)[v])) << "row " << r << " token " << v;
      worst = std::max(worst, double{std::fabs(gpu.Row(r)[v] - cpu.Row(r)[v])});
    }
    EXPECT_LE(worst, tol * scale) << "row " << r;
  }
}

// Runs `batch` on both backends and compares.
void Step(Pair* p, const ForwardBatch& batch, double tol = 0.03) {
  ForwardOutput a, b;
  const absl::Status sg = p->gpu->Forward(batch, &a);
  const absl::Status sc = p->cpu->Forward(batch, &b);
  ASSERT_TRUE(sg.ok()) << sg;
  ASSERT_TRUE(sc.ok()) << sc;
  ExpectClose(a, b, tol);
}

struct Seq {
  std::vector<int32_t> tokens;
  std::vector<int32_t> table;
};

SequenceChunk Chunk(const Seq& s, int32_t start, int32_t n, bool logits) {
  return {absl::MakeConstSpan(s.tokens).subspan(start, n), start, absl::MakeConstSpan(s.table),
          logits};
}

// `len` pseudo-random tokens; the caller sets the block table.
Seq MakeSeq(int32_t len, int32_t vocab, uint32_t seed) {
  Seq s;
  for (int32_t i = 0; i < len; ++i) {
    s.tokens.push_back(static_cast<int32_t>((seed * 131 + i * 17) % vocab));
  }
  return s;
}

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
    if (mixed) {
      o.graph_mixed_steps = true;
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

int64_t SeqId(int64_t request, int32_t sample = 0) {
  return request * SequenceRef::kMaxSamplesPerRequest + sample;
}

// The host Sampler's result for batch entry `entry` (its k-th sampled row) of the
// driver's last applied batch, on `logits` (Forward of the same chunks).
SampleResult HostSample(const testing::StepDriver& d, const ForwardOutput& logits,
                        size_t entry, int32_t row) {
  const ScheduledSequence& sc = d.batch().sequences[entry];
  const WorkerSequence& seq = *sc.state;
  const auto t = absl::MakeConstSpan(seq.tokens);
  SampleResult want;
  Sampler host(logits.vocab_size);
  const absl::Status s =
      host.Sample({seq.sampling, seq.sample_index}, absl::MakeConstSpan(logits.Row(row), logits.vocab_size),
                  t.subspan(0, seq.num_prompt_tokens), t.subspan(seq.num_prompt_tokens), &want,
                  sc.allowed_tokens);
  EXPECT_TRUE(s.ok()) << s;
  return want;
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

// Prefill of 3 sequences then `steps` decode steps (graph mode) on `gpu`; the logits of
// every step, concatenated.
std::vector<float> RunDecodes(CudaBackend* gpu, int32_t steps) {
  Seq a = MakeSeq(40, 96, 1), b = MakeSeq(19, 96, 2), c = MakeSeq(1, 96, 3);
  a.table = {0, 9, 2, 3, 4};
  b.table = {8, 1, 10};
  c.table = {16, 17};
  std::vector<float> all;
  ForwardBatch prefill;
  prefill.sequences = {Chunk(a, 0, 40, true), Chunk(b, 0, 19, true), Chunk(c, 0, 1, true)};
  ForwardOutput out;
  EXPECT_TRUE(gpu->Forward(prefill, &out).ok());
  all.insert(all.end(), out.logits.begin(), out.logits.begin() + out.num_rows * out.vocab_size);
  for (int32_t step = 0; step < steps; ++step) {
    for (Seq* s : {&a, &b, &c}) s->tokens.push_back((step * 5 + 1) % 96);
    ForwardBatch batch;
    for (Seq* s : {&a, &b, &c}) {
      batch.sequences.push_back(Chunk(*s, static_cast<int32_t>(s->tokens.size()) - 1, 1, true));
    }
    EXPECT_TRUE(gpu->Forward(batch, &out).ok());
    all.insert(all.end(), out.logits.begin(),
               out.logits.begin() + out.num_rows * out.vocab_size);
  }
  return all;
}

testing::TinyLlamaSpec GemvOnlySpec() {
  // Untied Q8_0 matrices: with <= 4 rows every linear, the LM head included, takes the
  // GEMV (no cuBLAS kernels in a decode graph).
  testing::TinyLlamaSpec spec;
  spec.matrix_type = GgmlType::kQ8_0;
  spec.hidden = 256;
  spec.num_heads = 4;
  spec.num_kv_heads = 2;
  spec.ffn = 160;
  spec.vocab = 96;
  spec.tied = false;
  return spec;
}

// Kernel launches per decode step, counted as the captured graph's nodes
// (cudaGraphGetNodes): model_runner.h's 1 + 8 L + 2 with the fused kernels, 1 + 11 L + 2
// with the separate ones and kSplitV1 (its reduction kernel runs: the graph's context
// bucket is split 4 ways).
TEST(CudaBackendGraphTest, KernelLaunchesPerDecodeStep) {
  SKIP_WITHOUT_CUDA();
  const testing::TinyLlamaSpec spec = GemvOnlySpec();
  const int64_t layers = spec.num_layers;
  for (bool fused : {true, false}) {
    CudaBackendOptions o;
    o.fused_kernels = fused;
    o.decode_kernel = fused ? kc::DecodeKernel::kPipelined : kc::DecodeKernel::kSplitV1;
    std::unique_ptr<Pair> p = MakePair(spec, o);
    ASSERT_NE(p, nullptr);
    RunDecodes(p->gpu.get(), 2);
    EXPECT_EQ(p->gpu->graph_captures(), 1);
    EXPECT_EQ(p->gpu->last_graph_nodes(), fused ? 1 + 8 * layers + 2 : 1 + 11 * layers + 2)
        << (fused ? "fused" : "separate") << " kernels";
  }
}

// WEFT_CUDA_KERNELS selects the A/B kernels at Create (the hello's kernels string says
// which); a malformed value fails Create.
TEST(CudaBackendGraphTest, KernelOverridesFromTheEnvironment) {
  SKIP_WITHOUT_CUDA();
  const std::vector<uint8_t> bytes = testing::BuildTinyLlama(GemvOnlySpec());
  auto file = GgufFile::FromBuffer(bytes.data(), bytes.size());
  ASSERT_TRUE(file.ok()) << file.status();
  CudaBackendOptions o;
  o.num_kv_blocks = 16;
  setenv("WEFT_CUDA_KERNELS", "decode=split_v1,fused=0,tc_prefill=0,qgemm=64", 1);
  auto b = CudaBackend::Create(**file, o);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE((*b)->kernels().find("decode=split_v1"), std::string::npos) << (*b)->kernels();
  EXPECT_EQ((*b)->kernels().find(";fused"), std::string::npos) << (*b)->kernels();
  EXPECT_NE((*b)->kernels().find(";qgemm<=64"), std::string::npos) << (*b)->kernels();
  setenv("WEFT_CUDA_KERNELS", "decode=grouped", 1);
  auto g = CudaBackend::Create(**file, o);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_NE((*g)->kernels().find("decode=grouped;fused"), std::string::npos) << (*g)->kernels();
  for (const char* bad : {"decode=fast", "qgemm=257", "qgemm=-1", "qgemm=x"}) {
    setenv("WEFT_CUDA_KERNELS", bad, 1);
    EXPECT_EQ(CudaBackend::Create(**file, o).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  unsetenv("WEFT_CUDA_KERNELS");
  auto d = CudaBackend::Create(**file, o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_NE((*d)->kernels().find("decode=pipelined;fused;tc_prefill"), std::string::npos)
      << (*d)->kernels();
}

// The fused kernels compute the same bits as the kernels they replace (same decode
// kernel); the two decode kernels agree to fp32 rounding.
TEST(CudaBackendGraphTest, FusedAndSeparateKernelsAgree) {
  SKIP_WITHOUT_CUDA();
  for (kc::KvDtype kv : {kc::KvDtype::kBf16, kc::KvDtype::kInt8}) {
    testing::TinyLlamaSpec spec = GemvOnlySpec();
    spec.matrix_type = GgmlType::kQ4_1;
    CudaBackendOptions o;
    o.kv_dtype = kv;
    std::unique_ptr<Pair> fused = MakePair(spec, o);
    o.fused_kernels = false;
    std::unique_ptr<Pair> separate = MakePair(spec, o);
    o.decode_kernel = kc::DecodeKernel::kSplitV1;
    std::unique_ptr<Pair> v1 = MakePair(spec, o);
    ASSERT_NE(fused, nullptr);
    ASSERT_NE(separate, nullptr);
    ASSERT_NE(v1, nullptr);
    const std::vector<float> a = RunDecodes(fused->gpu.get(), 5);
    const std::vector<float> b = RunDecodes(separate->gpu.get(), 5);
    const std::vector<float> c = RunDecodes(v1->gpu.get(), 5);
    EXPECT_EQ(a, b) << "fused vs separate kernels, KV " << KvDtypeName(kv);
    ASSERT_EQ(a.size(), c.size());
    double scale = 1e-3, worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      scale = std::max(scale, double{std::fabs(c[i])});
      worst = std::max(worst, double{std::fabs(a[i] - c[i])});
    }
    EXPECT_LE(worst, 2e-3 * scale) << "pipelined vs split_v1 decode, KV " << KvDtypeName(kv);
  }
}

// --quant_gemm_max_rows: the fused dequantize + tensor-core GEMM on the prefill's 60 rows
// (and the GEMV on the 3-row decodes) gives cuBLAS-on-bf16's logits up to fp32 summation
// order — the same bf16 weights and products (kernels/cuda/quant_gemm.h) — with graphs
// and without, for a 4-bit and a K-quant-free 8-bit model.
TEST(CudaBackendGraphTest, QuantGemmAndCublasAgree) {
  SKIP_WITHOUT_CUDA();
  for (GgmlType type : {GgmlType::kQ4_1, GgmlType::kQ8_0}) {
    testing::TinyLlamaSpec spec = GemvOnlySpec();
    spec.matrix_type = type;
    CudaBackendOptions o;
    std::unique_ptr<Pair> cublas = MakePair(spec, o);
    o.quant_gemm_max_rows = 256;
    std::unique_ptr<Pair> qgemm = MakePair(spec, o);
    ASSERT_NE(cublas, nullptr);
    ASSERT_NE(qgemm, nullptr);
    EXPECT_NE(qgemm->gpu->kernels().find(";qgemm<=256"), std::string::npos);
    const std::vector<float> a = RunDecodes(cublas->gpu.get(), 3);
    const std::vector<float> b = RunDecodes(qgemm->gpu.get(), 3);
    ASSERT_EQ(a.size(), b.size());
    double scale = 1e-3, worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      scale = std::max(scale, double{std::fabs(a[i])});
      worst = std::max(worst, double{std::fabs(a[i] - b[i])});
    }
    EXPECT_LE(worst, 2e-3 * scale) << GgmlTypeName(static_cast<uint32_t>(type));
  }
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

// ---- State kept between steps (issue 24) -----------------------------------------------
// The backend keeps state between steps — one decode workspace and split-counter buffer
// for every plan, a CUDA graph per (batch, context) bucket, the step-input staging
// buffers, the sampling scratch. A request must not notice what ran before it: the same
// greedy request, run on a fresh backend and again after a load of batches that grow and
// shrink (sizes, contexts, eager and graph steps, prefill chunks beside decodes), gives
// the same tokens and logits. (Before the fix, a decode plan smaller than an earlier one
// found garbage split counters and left its attention output stale.)

// The default model's attention shape (3 KV heads, group 3, head_dim 64), Q4_1 weights,
// contexts to 4K (graph context buckets 1024 and 2048).
testing::TinyLlamaSpec DefaultShapeSpec() {
  testing::TinyLlamaSpec spec;
  spec.matrix_type = GgmlType::kQ4_1;
  spec.hidden = 576;
  spec.num_heads = 9;
  spec.num_kv_heads = 3;
  spec.ffn = 160;
  spec.vocab = 96;
  spec.context = 4096;
  spec.tied = true;
  return spec;
}

constexpr int32_t kRequestBlocks = 24;  // blocks [0, 24) are the request's, the rest the load's

// The request: a 300-token prompt (its decodes take several splits), then 16 greedy
// tokens (with a repetition penalty, so the device's count rows matter), one sequence per
// step, as sequence `id`. Returns the tokens; *logits gets every step's row (Forward of
// the same chunk before each Step, whose token must be the host Sampler's on it).
std::vector<int32_t> RunGreedyRequest(CudaBackend* gpu, testing::StepDriver* d, int64_t id,
                                      std::vector<float>* logits) {
  constexpr int32_t kPrompt = 300, kNew = 16;
  const Seq s = MakeSeq(kPrompt, 96, 77);
  std::vector<int32_t> table;
  for (int32_t b = 0; b < kRequestBlocks; ++b) table.push_back(kRequestBlocks - 1 - b);
  SamplingConfig greedy;
  greedy.temperature = 0;
  greedy.repetition_penalty = 1.3f;
  logits->clear();
  ForwardOutput out;
  for (int32_t i = 0; i < kNew; ++i) {
    StepPlan plan = d->Plan();
    if (i == 0) {
      d->AddNew(&plan, id, s.tokens, kPrompt, table, greedy);
    } else {
      d->AddDecode(&plan, id);
    }
    const ForwardBatch& fb = d->Apply(plan);
    EXPECT_EQ(fb.sequences.size(), 1u);
    const absl::Status st = gpu->Forward(fb, &out);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok() || fb.sequences.size() != 1) return {};
    logits->insert(logits->end(), out.Row(0), out.Row(0) + out.vocab_size);
    const SampleResult want = HostSample(*d, out, 0, 0);
    StepOutput step;
    const absl::Status ss = d->StepApplied(&step);
    EXPECT_TRUE(ss.ok()) << ss;
    if (!ss.ok()) return {};
    EXPECT_EQ(step.samples[0].token, want.token) << "token " << i;
  }
  const WorkerSequence* seq = d->cache().Find(id);
  return std::vector<int32_t>(seq->tokens.begin() + kPrompt, seq->tokens.end());
}

// The load: 8 sequences (contexts 5 to ~1100, on blocks from kRequestBlocks on), prefilled
// in two steps (the second beside two decodes: an eager mixed step), then rounds of 3
// decode steps whose batch grows and shrinks (8, 2, 5, 1, 3, 8, 4, 1, 6 sequences),
// every step sampled on the device with penalties; the request `finish` and then the
// load's sequences finish in the last plans.
void RunMixedLoad(testing::StepDriver* d, int64_t finish) {
  const std::vector<int32_t> lens = {700, 17, 300, 64, 129, 1070, 5, 256};
  SamplingConfig params;
  params.seed = 5;
  params.temperature = 0.8f;
  params.repetition_penalty = 1.1f;
  params.frequency_penalty = 0.2f;
  int32_t next_block = kRequestBlocks;
  std::vector<std::vector<int32_t>> tables;
  for (size_t i = 0; i < lens.size(); ++i) {
    const int32_t blocks = (lens[i] + 64) / 16 + 1;  // room for the round's tokens
    tables.emplace_back();
    for (int32_t b = 0; b < blocks; ++b) tables.back().push_back(next_block++);
  }
  auto id = [](size_t i) { return SeqId(100 + static_cast<int64_t>(i)); };
  auto step = [&](const std::vector<size_t>& who, const std::vector<size_t>& prefill,
                  bool finish_all) {
    StepPlan plan = d->Plan();
    if (finish >= 0) plan.add_finished_seq_ids(finish);
    finish = -1;
    for (size_t i : prefill) {  // whole prompts
      d->AddNew(&plan, id(i), MakeSeq(lens[i], 96, 100 + static_cast<uint32_t>(i)).tokens,
                lens[i], tables[i], params);
    }
    for (size_t i : who) d->AddDecode(&plan, id(i));
    if (finish_all) {
      for (size_t i = 0; i < lens.size(); ++i) plan.add_finished_seq_ids(id(i));
    }
    StepOutput out;
    const absl::Status s = d->Run(plan, &out);
    ASSERT_TRUE(s.ok()) << s;
  };
  ASSERT_NO_FATAL_FAILURE(step({}, {0, 1, 2, 3}, false));
  ASSERT_NO_FATAL_FAILURE(step({0, 1}, {4, 5, 6, 7}, false));  // decodes beside prefills
  const std::vector<std::vector<size_t>> rounds = {
      {0, 1, 2, 3, 4, 5, 6, 7}, {5, 2}, {0, 1, 3, 6, 7}, {5}, {2, 4, 6},
      {0, 1, 2, 3, 4, 5, 6, 7}, {1, 3, 5, 7}, {0}, {2, 3, 4, 5, 6, 7}};
  for (size_t r = 0; r < rounds.size(); ++r) {
    for (int32_t k = 0; k < 3; ++k) ASSERT_NO_FATAL_FAILURE(step(rounds[r], {}, false));
  }
  ASSERT_NO_FATAL_FAILURE(step({}, {}, true));
}

struct StateCase {
  bool graphs;
  int32_t max_graph_batch;
  kc::DecodeKernel kernel;
  kc::KvDtype kv;
  bool mixed = false;  // piecewise graphs (up to 512 tokens)
};

TEST(CudaBackendStateTest, GreedyRequestIsTheSameBeforeAndAfterMixedLoad) {
  SKIP_WITHOUT_CUDA();
  const std::vector<uint8_t> bytes = testing::BuildTinyLlama(DefaultShapeSpec());
  auto file = GgufFile::FromBuffer(bytes.data(), bytes.size());
  ASSERT_TRUE(file.ok()) << file.status();
  const std::vector<StateCase> cases = {
      {true, 8, kc::DecodeKernel::kPipelined, kc::KvDtype::kF16},
      {true, 4, kc::DecodeKernel::kPipelined, kc::KvDtype::kInt8},  // 5-8 sequences eager
      {false, 8, kc::DecodeKernel::kPipelined, kc::KvDtype::kBf16},
      {true, 8, kc::DecodeKernel::kSplitV1, kc::KvDtype::kF16},
      // The request's 300-token prefill (tensor-core tiles) and the 5-8 sequence decode
      // steps on piecewise graphs; the load's prefills over 512 tokens eager.
      {true, 4, kc::DecodeKernel::kPipelined, kc::KvDtype::kBf16, /*mixed=*/true},
  };
  for (const StateCase& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << (c.graphs ? "graphs up to " : "eager, ") << c.max_graph_batch << ", "
                 << kc::DecodeKernelName(c.kernel) << ", KV " << KvDtypeName(c.kv)
                 << (c.mixed ? ", piecewise graphs" : ""));
    CudaBackendOptions o;
    o.num_kv_blocks = 256;
    o.cuda_graphs = c.graphs;
    o.max_graph_batch = c.max_graph_batch;
    o.decode_kernel = c.kernel;
    o.kv_dtype = c.kv;
    o.graph_mixed_steps = c.mixed;
    auto gpu = CudaBackend::Create(**file, o);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    std::vector<float> logits_before, logits_after;
    testing::StepDriver d(gpu->get());
    const std::vector<int32_t> before = RunGreedyRequest(gpu->get(), &d, SeqId(1), &logits_before);
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_EQ(before.size(), 16u);
    RunMixedLoad(&d, SeqId(1));
    ASSERT_FALSE(HasFatalFailure());
    const std::vector<int32_t> after = RunGreedyRequest(gpu->get(), &d, SeqId(2), &logits_after);
    ASSERT_FALSE(HasFatalFailure());
    EXPECT_EQ(after, before) << "the same greedy request after the load";
    ASSERT_EQ(logits_after.size(), logits_before.size());
    double scale = 1e-3, worst = 0;
    for (size_t i = 0; i < logits_before.size(); ++i) {
      scale = std::max(scale, double{std::fabs(logits_before[i])});
      worst = std::max(worst, double{std::fabs(logits_after[i] - logits_before[i])});
    }
    EXPECT_LE(worst, 1e-5 * scale) << "logits of the same request after the load";
    if (c.graphs) {
      EXPECT_GT((*gpu)->graph_replays(), 0);
    }
    const Backend::GraphStepCounts kinds = (*gpu)->graph_steps();
    EXPECT_EQ(kinds.piecewise > 0, c.mixed);
    EXPECT_GT(kinds.eager, 0);  // the load's prefills (and everything without graphs)
  }
}

TEST(CudaBackendModelTest, DefaultModelMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  WEFT_REQUIRE_DEFAULT_MODEL(path);
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  CpuBackendOptions co;
  co.model.kernels = KernelChoice::kReference;
  co.model.kv_dtype = KvDtype::kF32;  // the exact reference
  co.num_kv_blocks = 32;
  auto cpu = CpuBackend::Create(**file, co);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  CudaBackendOptions go;
  go.num_kv_blocks = 32;
  auto gpu = CudaBackend::Create(**file, go);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  Seq s;
  for (int32_t i = 0; i < 50; ++i) s.tokens.push_back(1000 + 37 * i);
  s.table = {4, 9, 2, 30};
  ForwardBatch prefill;
  prefill.sequences = {Chunk(s, 0, 49, true)};
  ForwardOutput a, b;
  ASSERT_TRUE((*gpu)->Forward(prefill, &a).ok());
  ASSERT_TRUE((*cpu)->Forward(prefill, &b).ok());
  ExpectClose(a, b, 0.05);
  ForwardBatch decode;
  decode.sequences = {Chunk(s, 49, 1, true)};
  ASSERT_TRUE((*gpu)->Forward(decode, &a).ok());
  ASSERT_TRUE((*cpu)->Forward(decode, &b).ok());
  ExpectClose(a, b, 0.05);
  // The greedy choice agrees unless the top two are within the tolerance.
  const float* ga = a.Row(0);
  const float* cb = b.Row(0);
  const int32_t gt = static_cast<int32_t>(std::max_element(ga, ga + a.vocab_size) - ga);
  const int32_t ct = static_cast<int32_t>(std::max_element(cb, cb + b.vocab_size) - cb);
  std::vector<float> sorted(cb, cb + b.vocab_size);
  std::sort(sorted.rbegin(), sorted.rend());
  if (sorted[0] - sorted[1] > 0.5f) {
    EXPECT_EQ(gt, ct);
  }
}

}  // namespace
}  // namespace weft

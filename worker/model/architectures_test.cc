// LlamaModel following the model description (common/model_config.h) of every
// architecture on tiny random GGUFs: chunking and batch invariance — a sliding-window
// model included, with windows shorter than the prompts and starting inside blocks —
// and what the window changes. Accuracy against llama.cpp and numpy:
// architectures_accuracy_test.
#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/gguf.h"
#include "gtest/gtest.h"
#include "worker/kv_cache.h"
#include "worker/model/llama_model.h"
#include "worker/model/testing/model_test_util.h"
#include "worker/model/testing/tiny_llama.h"

namespace weft {
namespace {

using testing::RunSteps;
using testing::Scheduled;

struct Arch {
  std::string name;
  testing::TinyLlamaSpec spec;
};

// One tiny model per architecture; gemma3 with head_dim 256, a window of 20 tokens
// (cut inside 16-token blocks) on layers 0 and 1, layer 2 global.
std::vector<Arch> Architectures() {
  std::vector<Arch> out;
  testing::TinyLlamaSpec s;
  s.matrix_type = GgmlType::kQ4_1;
  out.push_back({"llama", s});
  testing::TinyLlamaSpec l3 = s;
  l3.rope_freqs = true;
  l3.tied = true;
  l3.rope_scaling_type = "linear";
  l3.rope_scaling_factor = 2.0f;
  out.push_back({"llama3", l3});
  testing::TinyLlamaSpec q2 = s;
  q2.architecture = "qwen2";
  q2.tied = true;
  out.push_back({"qwen2", q2});
  testing::TinyLlamaSpec q3 = s;
  q3.architecture = "qwen3";
  out.push_back({"qwen3", q3});
  testing::TinyLlamaSpec g = s;
  g.architecture = "gemma3";
  g.num_layers = 3;
  g.hidden = 512;
  g.num_heads = 2;
  g.num_kv_heads = 1;
  g.ffn = 256;
  g.tied = true;
  g.rope_base = 1e6f;
  g.sliding_window = 20;
  g.swa_pattern = 3;
  g.final_logit_softcap = 30.0f;
  out.push_back({"gemma3", g});
  return out;
}

struct Tiny {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<KvCache> cache;
};

std::unique_ptr<Tiny> MakeTiny(const testing::TinyLlamaSpec& spec, KernelChoice kernels,
                               int32_t num_blocks = 64) {
  auto t = std::make_unique<Tiny>();
  t->bytes = testing::BuildTinyLlama(spec);
  auto file = GgufFile::FromBuffer(t->bytes.data(), t->bytes.size());
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return nullptr;
  t->file = std::move(*file);
  LlamaModelOptions o;
  o.kernels = kernels;
  o.num_threads = 2;
  auto model = LlamaModel::Create(*t->file, o);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  t->model = std::move(*model);
  auto cache = KvCache::Create(t->model->KvOptions(16, num_blocks));
  EXPECT_TRUE(cache.ok()) << cache.status();
  t->cache = std::move(*cache);
  return t;
}

std::vector<int32_t> Tokens(int32_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> out(n);
  for (int32_t& t : out) t = static_cast<int32_t>(rng() % vocab);
  return out;
}

// The fp32 reference kernels, and the fastest this CPU runs (int8 on AVX2 and up).
std::vector<KernelChoice> Paths() {
  std::vector<KernelChoice> out = {KernelChoice::kReference};
  if (ResolveKernelChoice(KernelChoice::kAuto) != KernelChoice::kReference) {
    out.push_back(KernelChoice::kAuto);
  }
  return out;
}

// Logits of every position of `tokens` (block table 0..), the prompt run in chunks of
// `chunk` tokens, each chunk asking for all its rows.
std::vector<std::vector<float>> AllLogits(Tiny* t, const std::vector<int32_t>& tokens,
                                          int32_t chunk) {
  std::vector<int32_t> table(64);
  for (int32_t i = 0; i < 64; ++i) table[i] = 63 - i;  // descending, non-contiguous ids
  std::vector<std::vector<float>> rows;
  ForwardOutput out;
  const int32_t n = static_cast<int32_t>(tokens.size());
  for (int32_t start = 0; start < n; start += chunk) {
    const int32_t len = std::min(chunk, n - start);
    ForwardBatch batch;
    SequenceChunk c;
    c.token_ids = absl::MakeConstSpan(tokens).subspan(start, len);
    c.start_pos = start;
    c.block_table = table;
    c.num_logits = len;
    batch.sequences.push_back(c);
    const absl::Status s = t->model->Forward(batch, t->cache.get(), &out);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return {};
    for (int32_t r = 0; r < out.num_rows; ++r) rows.emplace_back(out.Row(r), out.Row(r) + out.vocab_size);
  }
  return rows;
}

// Every position's logits are the same bits whether the prompt is prefilled at once, in
// chunks of 7 or 13 or decoded token by token (a window of 20 is cut mid-block by all).
TEST(ArchitecturesTest, ChunkedPrefillAndDecodeAreBitwiseOneShot) {
  for (const Arch& a : Architectures()) {
    for (KernelChoice k : Paths()) {
      SCOPED_TRACE(a.name + " " + KernelChoiceName(k));
      auto t = MakeTiny(a.spec, k);
      ASSERT_TRUE(t);
      const std::vector<int32_t> tokens = Tokens(70, a.spec.vocab, 7);
      const auto want = AllLogits(t.get(), tokens, 70);
      ASSERT_EQ(want.size(), 70u);
      for (int32_t chunk : {13, 7, 1}) {
        const auto got = AllLogits(t.get(), tokens, chunk);
        ASSERT_EQ(got.size(), want.size());
        for (size_t p = 0; p < want.size(); ++p) {
          ASSERT_EQ(std::memcmp(got[p].data(), want[p].data(), 4 * want[p].size()), 0)
              << "chunk " << chunk << " position " << p;
        }
      }
    }
  }
}

// A sequence's logits are the same bits alone and in a batch with 7 others in other
// phases (prefill chunks, decodes) and other blocks.
TEST(ArchitecturesTest, BatchInvariant) {
  constexpr int32_t kSteps = 5;
  for (const Arch& a : Architectures()) {
    for (KernelChoice k : Paths()) {
      SCOPED_TRACE(a.name + " " + KernelChoiceName(k));
      auto t = MakeTiny(a.spec, k, 128);
      ASSERT_TRUE(t);
      Scheduled target;
      target.tokens = Tokens(40, a.spec.vocab, 99);
      target.chunk = {23, 14, 1, 1, 1};  // two prefill chunks past the window, decodes
      std::vector<Scheduled> alone = {target};
      alone[0].table = {0, 1, 2};
      const auto want = RunSteps(t->model.get(), t->cache.get(), &alone, 0, kSteps);
      std::vector<Scheduled> batch;
      std::mt19937 rng(5);
      int32_t next_block = 127;
      for (int32_t j = 0; j < 8; ++j) {
        Scheduled s;
        if (j == 3) {
          s = target;
          s.chunk.insert(s.chunk.begin(), 0);
        } else {
          const bool decoding = j % 3 == 0;
          s.chunk.push_back(decoding ? 25 + j : 0);
          for (int32_t step = 0; step < kSteps; ++step) {
            s.chunk.push_back(decoding ? 1 : static_cast<int32_t>(rng() % 30));
          }
          int32_t total = 0;
          for (int32_t c : s.chunk) total += c;
          s.tokens = Tokens(std::max(total, 1), a.spec.vocab, 1000 + j);
        }
        const int32_t blocks = (static_cast<int32_t>(s.tokens.size()) + 15) / 16;
        for (int32_t b = 0; b < blocks; ++b) s.table.push_back(next_block--);
        batch.push_back(s);
      }
      ASSERT_GT(next_block, 3);
      const auto got = RunSteps(t->model.get(), t->cache.get(), &batch, 3, kSteps + 1);
      for (int32_t step = 0; step < kSteps; ++step) {
        ASSERT_FALSE(want[step].empty());
        ASSERT_EQ(got[step + 1].size(), want[step].size());
        EXPECT_EQ(std::memcmp(got[step + 1].data(), want[step].data(), 4 * want[step].size()), 0)
            << "step " << step;
      }
    }
  }
}

// Gemma 3 with local and global layers of one RoPE base: up to the window's length the
// window changes no bit; past it, it changes the logits (it is applied).
TEST(ArchitecturesTest, WindowMattersOnlyPastItsLength) {
  testing::TinyLlamaSpec spec = Architectures().back().spec;
  spec.rope_base = 10000.0f;  // = the local layers' default base
  auto windowed = MakeTiny(spec, KernelChoice::kReference);
  spec.sliding_window = 0;
  auto global = MakeTiny(spec, KernelChoice::kReference);
  ASSERT_TRUE(windowed && global);
  ASSERT_EQ(windowed->model->config().max_sliding_window(), 20);
  ASSERT_EQ(global->model->config().max_sliding_window(), 0);
  const std::vector<int32_t> tokens = Tokens(40, spec.vocab, 3);
  const auto a = AllLogits(windowed.get(), tokens, 40);
  const auto b = AllLogits(global.get(), tokens, 40);
  ASSERT_EQ(a.size(), 40u);
  for (size_t p = 0; p < 40; ++p) {
    const bool same = std::memcmp(a[p].data(), b[p].data(), 4 * a[p].size()) == 0;
    EXPECT_EQ(same, p < 20) << "position " << p;
  }
}

}  // namespace
}  // namespace weft

// LlamaModel on the default model (SmolLM2-135M, Q4_1): the numpy reference, chunked
// prefill and the use of KV blocks. Skips without the model.
#include "worker/model/llama_model.h"

#include <limits.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/kv_cache.h"
#include "worker/model/testing/model_test_util.h"

namespace weft {
namespace {

using testing::Argmax;
using testing::Compare;
using testing::Error;
using testing::Iota;
using testing::Prefill;
using testing::Tokens;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using LlamaModelTest = testing::DefaultModelTest;

// tests/testdata/numpy_ref_logits.bin (written by tools/refdata/numpy_llama_ref.py), found
// through the runfiles symlink of tools/models.txt like the model itself.
std::string RefDataPath() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && ws != nullptr) {
    const std::string marker = std::string(srcdir) + "/" + ws + "/tools/models.txt";
    char resolved[PATH_MAX];
    if (::realpath(marker.c_str(), resolved) != nullptr) {
      std::string root = resolved;
      root = root.substr(0, root.rfind('/'));
      root = root.substr(0, root.rfind('/'));
      return root + "/tests/testdata/numpy_ref_logits.bin";
    }
  }
  return "tests/testdata/numpy_ref_logits.bin";
}

struct RefData {
  uint64_t model_bytes = 0;
  uint32_t vocab = 0;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<float>> logits;
};

bool ReadRefData(const std::string& path, RefData* out) {
  std::ifstream in(path, std::ios::binary);
  char magic[8];
  uint32_t version, num, vocab, reserved;
  if (!in.read(magic, 8) || std::memcmp(magic, "WEFTNREF", 8) != 0) return false;
  in.read(reinterpret_cast<char*>(&version), 4).read(reinterpret_cast<char*>(&num), 4);
  in.read(reinterpret_cast<char*>(&vocab), 4).read(reinterpret_cast<char*>(&reserved), 4);
  in.read(reinterpret_cast<char*>(&out->model_bytes), 8);
  if (!in || version != 1) return false;
  out->vocab = vocab;
  out->prompts.resize(num);
  for (auto& p : out->prompts) {
    uint32_t n;
    in.read(reinterpret_cast<char*>(&n), 4);
    p.resize(n);
    in.read(reinterpret_cast<char*>(p.data()), 4 * n);
  }
  out->logits.assign(num, std::vector<float>(vocab));
  for (auto& l : out->logits) in.read(reinterpret_cast<char*>(l.data()), 4 * vocab);
  return static_cast<bool>(in);
}

// Criterion 1: the reference kernels match an independent numpy forward pass within
// 1e-3 x max |logit|, and so do the fp32 fast paths (exact dequantized weights). The
// int8 paths quantize activations as llama.cpp does (and the AMX path rounds them and the
// weights to bf16); they are held to the llama.cpp criteria instead
// (llama_accuracy_test); their distance to numpy is reported here.
TEST_F(LlamaModelTest, MatchesNumpyReference) {
  RefData ref;
  ASSERT_TRUE(ReadRefData(RefDataPath(), &ref)) << "cannot read " << RefDataPath();
  ASSERT_GE(ref.prompts.size(), 3u);
  for (KernelChoice kernels : SupportedKernelChoices()) {
    auto m = Model(kernels);
    ASSERT_TRUE(m);
    ASSERT_EQ(int64_t{ref.vocab}, m->config().vocab_size);
    const bool int8 = RoundsActivations(kernels);
    for (size_t p = 0; p < ref.prompts.size(); ++p) {
      auto cache = Cache(*m, 8);
      const std::vector<float> got = Prefill(m.get(), cache.get(), ref.prompts[p], Iota(0, 8),
                                             1 << 20);
      ASSERT_EQ(got.size(), ref.vocab);
      const Error e = Compare(got, ref.logits[p]);
      std::printf("numpy vs weft (%s kernels), prompt %zu (%zu tokens): max |diff| %.3g, "
                  "max |logit| %.3g, ratio %.3g\n",
                  KernelChoiceName(kernels), p, ref.prompts[p].size(), e.max_abs_diff,
                  e.max_abs_ref, e.ratio());
      if (int8) {
        EXPECT_LE(e.ratio(), 0.1) << "prompt " << p;  // a sanity bound only
        continue;
      }
      EXPECT_LE(e.ratio(), 1e-3) << "prompt " << p;
      EXPECT_EQ(Argmax(got), Argmax(ref.logits[p])) << "prompt " << p;
    }
  }
}

// Criterion 4a: prefill in chunks of 7 matches one-shot prefill (<= 1e-5 relative; in
// fact bitwise), and so does a decode step after it. For every fast path, not the scalar
// reference matmuls (each row on its own, nothing batched differently; ~55 of this test's
// 70 s; MatchesNumpyReference holds them to numpy): the reference attention, which is
// what chunking exercises, still runs here under the avx2 choice (every CPU we support).
TEST_F(LlamaModelTest, ChunkedPrefillMatchesOneShot) {
  const std::vector<int32_t> prompt = Tokens(61, 7);
  struct Case {
    KernelChoice kernels;
    KvDtype kv;
  };
  std::vector<Case> cases;
  for (KernelChoice k : SupportedKernelChoices()) {
    if (k != KernelChoice::kReference) cases.push_back({k, KvDtype::kF32});
  }
  for (KvDtype kv : {KvDtype::kF16, KvDtype::kBf16, KvDtype::kInt8}) {
    cases.push_back({KernelChoice::kAuto, kv});
  }
  for (const Case& c : cases) {
    const KernelChoice kernels = c.kernels;
    SCOPED_TRACE(std::string(KernelChoiceName(kernels)) + " kv " + KvDtypeName(c.kv));
    auto m = Model(kernels, c.kv);
    ASSERT_TRUE(m);
    auto one_cache = Cache(*m, 8);
    auto chunk_cache = Cache(*m, 8);
    const std::vector<int32_t> table = {0, 1, 2, 3};
    const std::vector<float> one = Prefill(m.get(), one_cache.get(), prompt, table, 61);
    const std::vector<int32_t> other = {4, 6, 5, 7};
    const std::vector<float> chunked = Prefill(m.get(), chunk_cache.get(), prompt, other, 7);
    const Error e = Compare(chunked, one);
    std::printf("chunked (7) vs one-shot prefill (%s, kv %s): max |diff| %.3g (ratio %.3g)\n",
                KernelChoiceName(kernels), KvDtypeName(c.kv), e.max_abs_diff, e.ratio());
    EXPECT_LE(e.ratio(), 1e-5);
    EXPECT_EQ(chunked, one);
    // One decode step on top of each.
    const std::vector<int32_t> next = {Argmax(one)};
    ForwardOutput a, b;
    ForwardBatch batch;
    batch.sequences.push_back({next, 61, table, true});
    ASSERT_TRUE(m->Forward(batch, one_cache.get(), &a).ok());
    batch.sequences[0].block_table = other;
    ASSERT_TRUE(m->Forward(batch, chunk_cache.get(), &b).ok());
    EXPECT_EQ(std::vector<float>(a.Row(0), a.Row(0) + a.vocab_size),
              std::vector<float>(b.Row(0), b.Row(0) + b.vocab_size));
  }
}

// Criterion 4b: KV blocks are used exactly as the block tables say. The pool starts
// NaN-poisoned: blocks outside every table and slots past each sequence's length stay
// untouched (NaN), every slot of a position that ran is written, and the logits equal a
// run on a zeroed pool with other block ids.
TEST_F(LlamaModelTest, KvBlocksUsedExactlyAsTablesSay) {
  auto m = Model(KernelChoice::kAuto);
  ASSERT_TRUE(m);
  auto cache = Cache(*m, 40);
  for (int32_t b = 0; b < 40; ++b) {
    std::fill_n(cache->BlockData(BlockId(b)), cache->floats_per_block(), kNaN);
  }
  const std::vector<int32_t> a_tokens = Tokens(37, 1), b_tokens = Tokens(16, 2),
                             c_tokens = Tokens(5, 3);
  const std::vector<std::vector<int32_t>> tables = {{31, 4, 17}, {9}, {22}};
  const std::vector<std::vector<int32_t>> fresh_tables = {{0, 1, 2}, {3}, {4}};
  auto run = [&](KvCache* kv, const std::vector<std::vector<int32_t>>& t) {
    // A: chunks of 7 over 6 steps; B: one shot at step 0; C: one token per step.
    std::vector<std::vector<float>> logits;
    ForwardOutput out;
    for (int32_t step = 0; step < 6; ++step) {
      ForwardBatch batch;
      const int32_t a0 = step * 7, an = std::min(7, 37 - a0);
      batch.sequences.push_back({absl::MakeConstSpan(a_tokens).subspan(a0, an), a0, t[0],
                                 a0 + an == 37});
      if (step == 0) batch.sequences.push_back({b_tokens, 0, t[1], true});
      if (step < 5) {
        batch.sequences.push_back({absl::MakeConstSpan(c_tokens).subspan(step, 1), step, t[2],
                                   true});
      }
      EXPECT_TRUE(m->Forward(batch, kv, &out).ok());
      for (int32_t r = 0; r < out.num_rows; ++r) {
        logits.emplace_back(out.Row(r), out.Row(r) + out.vocab_size);
      }
    }
    return logits;
  };
  const auto poisoned = run(cache.get(), tables);
  auto fresh = Cache(*m, 8);
  const auto clean = run(fresh.get(), fresh_tables);
  ASSERT_EQ(poisoned.size(), clean.size());
  for (size_t i = 0; i < clean.size(); ++i) {
    for (float x : poisoned[i]) ASSERT_TRUE(std::isfinite(x));
    EXPECT_EQ(poisoned[i], clean[i]) << "logits row " << i;
  }
  // Slot-level check of the pool through the documented layout.
  const KvPoolOptions& o = cache->options();
  const int64_t half = int64_t{o.num_kv_heads} * o.head_dim * o.block_size;
  const int32_t lengths[] = {37, 16, 5};
  std::vector<int32_t> owner_len(40, -1), owner_first(40, -1);
  for (int s = 0; s < 3; ++s) {
    for (size_t i = 0; i < tables[s].size(); ++i) {
      owner_len[tables[s][i]] = lengths[s];
      owner_first[tables[s][i]] = static_cast<int32_t>(i) * o.block_size;
    }
  }
  for (int32_t b = 0; b < 40; ++b) {
    const float* data = cache->BlockData(BlockId(b));
    for (int32_t l = 0; l < o.num_layers; ++l) {
      for (int32_t h = 0; h < o.num_kv_heads; ++h) {
        for (int32_t slot = 0; slot < o.block_size; ++slot) {
          const bool used = owner_len[b] >= 0 && owner_first[b] + slot < owner_len[b];
          for (int32_t d = 0; d < o.head_dim; ++d) {
            const float k = data[l * 2 * half + h * o.head_dim * o.block_size + d * o.block_size + slot];
            const float v = data[l * 2 * half + half + h * o.head_dim * o.block_size + slot * o.head_dim + d];
            ASSERT_EQ(std::isnan(k), !used) << "block " << b << " layer " << l << " slot " << slot;
            ASSERT_EQ(std::isnan(v), !used) << "block " << b << " layer " << l << " slot " << slot;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace weft

// The model runtime against llama.cpp on the default model (SmolLM2-135M Q4_1), on every
// kernel path this CPU can run (tests/testdata/README.md describes the reference data;
// tools/refdata/make_llama_ref.py made it with llama.cpp build 0c1e570):
//   * perplexity on tests/testdata/ppl_text.txt at most 1 % above llama-perplexity's
//     (and not implausibly far below it);
//   * teacher-forced top-1 agreement on >= 95 % of the 1,275 scored positions, and at
//     every disagreement each engine's token is in the other's top 5;
//   * greedy 32-token continuations of 14 prompts identical up to the first divergence,
//     where Weft's token is among llama.cpp's top 3 — unless llama.cpp's own top 1 and
//     top 3 are within the two engines' measured disagreement (tolerance below): in such
//     a dense tie a 4th candidate is as close, and which one wins is noise. The test
//     measures the tolerance on the same path: the 99th percentile of |Weft - llama.cpp|
//     over llama.cpp's top-5 logits at the 255 teacher-forced positions of one chunk
//     (~0.45 logit here; llama.cpp itself is ~0.1 away from exact arithmetic at the
//     median, tests/testdata/README.md). Cases that end at such a tie are counted.
// Exact agreement is not expected: llama.cpp quantizes activations to int8 for its
// Q4_1/Q8_0 matmuls (tests/testdata/README.md).
// The fp32 reference kernels are held to the independent numpy forward pass instead
// (llama_model_test, 1e-3 x max |logit|): they are ~10x slower, and every fast path
// here is checked against llama.cpp directly. `auto` is one of the paths listed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "common/gguf.h"
#include "common/testing/model_path.h"
#include "common/tokenizer.h"
#include "common/tokenizer_test_util.h"
#include "gtest/gtest.h"
#include "worker/backends/cpu_backend.h"
#include "worker/model/testing/greedy_follow.h"
#include "worker/model/perplexity.h"

namespace weft {
namespace {

// Top `k` ids of `logits`, largest first, ties to the smaller id (as the reference).
std::vector<int32_t> TopK(absl::Span<const float> logits, int k) {
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  ids.resize(k);
  return ids;
}

bool Contains(const std::vector<int32_t>& v, int32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

testing::JsonValue LoadJson(const std::string& name) {
  auto text = testing::ReadFile(testing::TestDataPath(name));
  EXPECT_TRUE(text.ok()) << text.status();
  auto v = testing::ParseJson(text.ok() ? *text : "{}");
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : testing::JsonValue();
}

struct Path {
  KernelChoice kernels;
  KvDtype kv_dtype;
};

std::string PathName(const Path& p) {
  return std::string(KernelChoiceName(p.kernels)) + "_kv_" + KvDtypeName(p.kv_dtype);
}

class LlamaAccuracyTest : public ::testing::TestWithParam<Path> {
 protected:
  void SetUp() override {
    path_ = testing::FindModelFile();
    if (path_.empty()) GTEST_SKIP() << "default model not found (set WEFT_MODEL_DIR)";
    auto file = GgufFile::Open(path_);
    ASSERT_TRUE(file.ok()) << file.status();
    file_ = std::move(*file);
    CpuBackendOptions o;
    o.model.kernels = GetParam().kernels;
    o.model.kv_dtype = GetParam().kv_dtype;
    o.model.num_threads = 2;
    o.num_kv_blocks = 512 / o.block_size;
    auto b = CpuBackend::Create(*file_, o);
    if (!b.ok() && b.status().code() == absl::StatusCode::kFailedPrecondition) {
      GTEST_SKIP() << "kernels " << KernelChoiceName(GetParam().kernels)
                   << " cannot run on this CPU: " << b.status().message();
    }
    ASSERT_TRUE(b.ok()) << b.status();
    backend_ = std::move(*b);
  }

  std::string path_;
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<CpuBackend> backend_;
};

TEST_P(LlamaAccuracyTest, PerplexityAndTeacherForcedTop1MatchLlamaCpp) {
  const testing::JsonValue ref = LoadJson("llama_ref_topk.json");
  const std::vector<int32_t> tokens = ref.Get("tokens")->Ints();
  const std::vector<int32_t> positions = ref.Get("positions")->Ints();
  const testing::JsonValue& top_ids = *ref.Get("top_ids");
  const double llama_ppl = ref.Get("llama_perplexity")->Get("ppl")->number;
  ASSERT_EQ(positions.size(), 1275u);

  // The text tokenizes as llama-perplexity tokenized it.
  auto tokenizer = Tokenizer::FromGguf(*file_);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto text = testing::ReadFile(testing::TestDataPath("ppl_text.txt"));
  ASSERT_TRUE(text.ok()) << text.status();
  std::string t = *text;
  if (!t.empty() && t.back() == '\n') t.pop_back();
  EncodeOptions eo;
  eo.parse_special = false;
  EXPECT_EQ((*tokenizer)->Encode(t, eo), tokens);

  const testing::JsonValue& top_logits = *ref.Get("top_logits");
  std::vector<float> diffs;  // |Weft - llama.cpp| on llama.cpp's top-5 logits
  size_t k = 0, agree = 0, disagree_outside_top5 = 0;
  auto result = Perplexity(backend_.get(), tokens, PerplexityOptions(),
                           [&](int64_t p, absl::Span<const float> logits) {
                             ASSERT_LT(k, positions.size());
                             ASSERT_EQ(p, positions[k]);
                             const std::vector<int32_t> theirs = top_ids.array[k].Ints();
                             const std::vector<int32_t> ours = TopK(logits, 5);
                             for (size_t j = 0; j < theirs.size(); ++j) {
                               diffs.push_back(std::fabs(
                                   logits[theirs[j]] -
                                   static_cast<float>(top_logits.array[k].array[j].number)));
                             }
                             if (ours[0] == theirs[0]) {
                               ++agree;
                             } else if (!Contains(theirs, ours[0]) || !Contains(ours, theirs[0])) {
                               ++disagree_outside_top5;
                               ADD_FAILURE() << "position " << p << ": Weft's top-1 " << ours[0]
                                             << ", llama.cpp's " << theirs[0]
                                             << ": not in each other's top 5";
                             }
                             ++k;
                           });
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(k, positions.size());
  const double agreement = static_cast<double>(agree) / k;
  std::printf("%s: perplexity %.4f (llama.cpp %.4f, ratio %.4f); top-1 agreement %.2f%% "
              "of %zu positions\n",
              PathName(GetParam()).c_str(), result->perplexity, llama_ppl,
              result->perplexity / llama_ppl, 100 * agreement, k);
  std::sort(diffs.begin(), diffs.end());
  std::printf("%s: |Weft - llama.cpp| on llama.cpp's top-5 logits: median %.3f, p99 %.3f, max %.3f\n",
              PathName(GetParam()).c_str(), diffs[diffs.size() / 2], diffs[diffs.size() * 99 / 100],
              diffs.back());
  RecordProperty("perplexity", std::to_string(result->perplexity));
  RecordProperty("top1_agreement", std::to_string(agreement));
  EXPECT_LE(result->perplexity, 1.01 * llama_ppl);
  // Exact arithmetic is up to ~1 % below llama.cpp; far below means something is wrong.
  EXPECT_GE(result->perplexity, 0.97 * llama_ppl);
  EXPECT_GE(agreement, 0.95);
  EXPECT_EQ(disagree_outside_top5, 0u);
}

// The 99th percentile of |Weft - llama.cpp| on llama.cpp's top-5 logits over the first
// teacher-forced chunk.
float LogitTolerance(Backend* backend) {
  const testing::JsonValue ref = LoadJson("llama_ref_topk.json");
  const std::vector<int32_t> tokens = ref.Get("tokens")->Ints();
  const testing::JsonValue& top_ids = *ref.Get("top_ids");
  const testing::JsonValue& top_logits = *ref.Get("top_logits");
  PerplexityOptions po;
  po.max_chunks = 1;
  std::vector<float> diffs;
  size_t k = 0;
  auto r = Perplexity(backend, tokens, po, [&](int64_t, absl::Span<const float> logits) {
    const std::vector<int32_t> ids = top_ids.array[k].Ints();
    for (size_t j = 0; j < ids.size(); ++j) {
      diffs.push_back(std::fabs(logits[ids[j]] - static_cast<float>(top_logits.array[k].array[j].number)));
    }
    ++k;
  });
  EXPECT_TRUE(r.ok()) << r.status();
  if (diffs.empty()) return 0;
  std::sort(diffs.begin(), diffs.end());
  return diffs[diffs.size() * 99 / 100];
}

TEST_P(LlamaAccuracyTest, GreedyContinuationsMatchLlamaCppUpToANearTie) {
  const float tolerance = LogitTolerance(backend_.get());
  const testing::JsonValue ref = LoadJson("llama_ref_greedy.json");
  const testing::JsonValue& cases = *ref.Get("cases");
  ASSERT_GE(cases.array.size(), 10u);
  std::vector<int32_t> table(backend_->num_kv_blocks());
  std::iota(table.begin(), table.end(), 0);
  int total_agreed = 0, identical = 0, dense_ties = 0;
  for (size_t c = 0; c < cases.array.size(); ++c) {
    const testing::JsonValue& cs = cases.array[c];
    const std::vector<int32_t> want = cs.Get("generated")->Ints();
    auto followed = testing::FollowGreedy(backend_.get(), table, cs.Get("prompt_ids")->Ints(), want);
    ASSERT_TRUE(followed.ok()) << followed.status();
    const int agreed = followed->agreed;
    if (followed->diverged()) {
      const size_t i = agreed;
      const int32_t ours = followed->ours;
      const std::vector<int32_t> top3 = cs.Get("top_ids")->array[i].Ints();
      const testing::JsonValue& top3_logits = cs.Get("top_logits")->array[i];
      const double spread = top3_logits.array[0].number - top3_logits.array[2].number;
      if (!Contains(top3, ours) && spread < tolerance) {
        ++dense_ties;
        std::printf("case %zu step %zu: Weft's %d is outside llama.cpp's top 3, whose logits "
                    "span %.3f (< tolerance %.3f): a dense tie\n",
                    c, i, ours, spread, tolerance);
      } else {
        EXPECT_TRUE(Contains(top3, ours))
            << "case " << c << " step " << i << ": Weft's " << ours
            << " is not in llama.cpp's top 3 (their top-3 logits span " << spread
            << ", tolerance " << tolerance << ")";
      }
    }
    total_agreed += agreed;
    if (agreed == static_cast<int>(want.size())) ++identical;
  }
  // The exception must stay an exception.
  EXPECT_LE(dense_ties, 2);
  std::printf("%s: %d of %zu greedy continuations identical over 32 tokens; %.1f tokens "
              "agree on average before a divergence; %d ended at a dense tie (tolerance %.3f)\n",
              PathName(GetParam()).c_str(), identical, cases.array.size(),
              static_cast<double>(total_agreed) / cases.array.size(), dense_ties, tolerance);
}

// Every fast kernel path, and every KV cache type on the int8 VNNI path and on the AMX
// path (the default where AMX exists; skipped elsewhere).
INSTANTIATE_TEST_SUITE_P(
    Paths, LlamaAccuracyTest,
    ::testing::Values(Path{KernelChoice::kAmx, KvDtype::kF16},
                      Path{KernelChoice::kAmx, KvDtype::kBf16},
                      Path{KernelChoice::kAmx, KvDtype::kInt8},
                      Path{KernelChoice::kAvx512Vnni, KvDtype::kF16},
                      Path{KernelChoice::kAvx512Vnni, KvDtype::kF32},
                      Path{KernelChoice::kAvx512Vnni, KvDtype::kBf16},
                      Path{KernelChoice::kAvx512Vnni, KvDtype::kInt8},
                      Path{KernelChoice::kAvx2, KvDtype::kF16},
                      Path{KernelChoice::kAvx512, KvDtype::kF32},
                      Path{KernelChoice::kPacked, KvDtype::kF16}),
    [](const ::testing::TestParamInfo<Path>& i) { return PathName(i.param); });

}  // namespace
}  // namespace weft

// The tiny synthetic models of every architecture (tools/synth/make_model.py, made at
// test time by tools/synth/synth_model.sh and checked against the sha256 the references
// recorded) against tests/testdata/arch_ref_<preset>.json (tools/refdata/make_arch_ref.py):
//   * the fp32 reference kernels match the independent numpy forward pass within 1e-3 x
//     max |logit| (the default model's criterion), with the same argmax;
//   * every kernel path this CPU runs matches llama.cpp's logits within the tolerance the
//     reference file states (3 x llama.cpp's own distance to numpy, fixed before Weft ran);
//   * 32 greedy tokens agree with llama.cpp's, or first diverge where llama.cpp's top two
//     are within that tolerance of each other (a near-tie both sides may break either
//     way) with Weft's token in its top 3.
// Skips (saying so) when the generator's venv cannot be made (no package index).
#include <stdio.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/gguf.h"
#include "common/tokenizer_test_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/kv_cache.h"
#include "worker/model/llama_model.h"

namespace weft {
namespace {

using json = nlohmann::json;

const char* const kPresets[] = {"tiny-llama", "tiny-llama3", "tiny-qwen2", "tiny-qwen3",
                                "tiny-gemma3"};

std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && ws != nullptr) return absl::StrCat(srcdir, "/", ws, "/", path);
  return path;
}

// Runs `cmd`, returns its exit code and stdout.
int Run(const std::string& cmd, std::string* out) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

struct Ref {
  json doc;
  std::string model_path;
  std::string skip;
};

Ref LoadRef(const std::string& preset) {
  Ref r;
  std::ifstream in(testing::TestDataPath("arch_ref_" + preset + ".json"));
  r.doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
  const json& m = r.doc["meta"]["model"];
  std::string out;
  const int code = Run(absl::StrCat("/bin/bash ", Runfile("tools/synth/synth_model.sh"), " ",
                                    m["preset"].get<std::string>(), " ",
                                    m["types"].get<std::string>(), " ", m["seed"].get<int>(), " ",
                                    m["sha256"].get<std::string>()),
                       &out);
  if (code == 3) {
    r.skip = "the synthetic-model generator's venv cannot be made (package index unreachable)";
  } else if (code == 0) {
    r.model_path = std::string(absl::StripAsciiWhitespace(out));
  } else {
    ADD_FAILURE() << "tools/synth/synth_model.sh " << preset << " failed with exit " << code;
  }
  return r;
}

struct Loaded {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<KvCache> cache;
  std::vector<int32_t> table;
};

std::unique_ptr<Loaded> Load(const std::string& path, KernelChoice kernels) {
  auto l = std::make_unique<Loaded>();
  auto file = GgufFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return nullptr;
  l->file = std::move(*file);
  LlamaModelOptions o;
  o.kernels = kernels;
  o.num_threads = 2;
  auto model = LlamaModel::Create(*l->file, o);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  l->model = std::move(*model);
  auto cache = KvCache::Create(l->model->KvOptions(16, 16));
  EXPECT_TRUE(cache.ok()) << cache.status();
  l->cache = std::move(*cache);
  for (int32_t b = 0; b < 16; ++b) l->table.push_back(15 - b);
  return l;
}

// Logits of the token at position `start` + len(tokens) - 1 after running `tokens`.
std::vector<float> Step(Loaded* l, const std::vector<int32_t>& tokens, int32_t start) {
  ForwardBatch batch;
  batch.sequences.push_back({tokens, start, l->table, true});
  ForwardOutput out;
  const absl::Status s = l->model->Forward(batch, l->cache.get(), &out);
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok() || out.num_rows != 1) return {};
  return std::vector<float>(out.Row(0), out.Row(0) + out.vocab_size);
}

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

float MaxAbs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

float MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

std::vector<KernelChoice> Paths() {
  std::vector<KernelChoice> out = {KernelChoice::kReference};
  for (KernelChoice k : SupportedKernelChoices()) {
    if (k != KernelChoice::kReference) out.push_back(k);
  }
  return out;
}

class ArchitecturesAccuracyTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ArchitecturesAccuracyTest, MatchesNumpyAndLlamaCpp) {
  const Ref ref = LoadRef(GetParam());
  if (!ref.skip.empty()) GTEST_SKIP() << ref.skip;
  ASSERT_FALSE(ref.model_path.empty());
  const double tolerance = ref.doc["tolerance"].get<double>();
  ASSERT_GT(tolerance, 0.0);
  for (KernelChoice k : Paths()) {
    SCOPED_TRACE(KernelChoiceName(k));
    auto l = Load(ref.model_path, k);
    ASSERT_TRUE(l);
    int p = 0;
    for (const json& c : ref.doc["prompts"]) {
      const std::vector<int32_t> ids = c["ids"].get<std::vector<int32_t>>();
      const std::vector<float> numpy = c["numpy_logits"].get<std::vector<float>>();
      const std::vector<float> llama = c["llama_logits"].get<std::vector<float>>();
      const std::vector<float> got = Step(l.get(), ids, 0);
      ASSERT_EQ(got.size(), numpy.size());
      const float scale = MaxAbs(numpy);
      const double vs_numpy = MaxDiff(got, numpy) / scale;
      const double vs_llama = MaxDiff(got, llama) / scale;
      std::printf("%s %s prompt %d (%zu tokens): vs numpy %.3g, vs llama.cpp %.3g (tolerance "
                  "%.3g; llama.cpp vs numpy %.3g)\n",
                  GetParam(), KernelChoiceName(k), p, ids.size(), vs_numpy, vs_llama, tolerance,
                  c["llama_vs_numpy"].get<double>());
      if (k == KernelChoice::kReference) {
        EXPECT_LE(vs_numpy, 1e-3) << "prompt " << p;
        EXPECT_EQ(Argmax(got), Argmax(numpy)) << "prompt " << p;
      }
      EXPECT_LE(vs_llama, tolerance) << "prompt " << p;

      // Greedy continuation (the prompt is in the cache now).
      const std::vector<int32_t> want = c["greedy"].get<std::vector<int32_t>>();
      const auto& top_ids = c["greedy_top_ids"];
      const auto& top_logits = c["greedy_top_logits"];
      std::vector<float> row = got;
      size_t agreed = 0;
      for (size_t step = 0; step < want.size(); ++step) {
        const int32_t tok = Argmax(row);
        if (tok != want[step]) {
          const std::vector<int32_t> top3 = top_ids[step].get<std::vector<int32_t>>();
          const double margin = top_logits[step][0].get<double>() - top_logits[step][1].get<double>();
          EXPECT_NE(std::find(top3.begin(), top3.end(), tok), top3.end())
              << "prompt " << p << " step " << step;
          EXPECT_LE(margin, tolerance * scale)
              << "prompt " << p << " step " << step << ": Weft's " << tok << " vs llama.cpp's "
              << want[step] << " is no near-tie";
          break;
        }
        ++agreed;
        if (step + 1 < want.size()) {
          row = Step(l.get(), {tok}, static_cast<int32_t>(ids.size() + step));
          ASSERT_FALSE(row.empty());
        }
      }
      std::printf("  greedy: %zu of %zu tokens agree\n", agreed, want.size());
      ++p;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, ArchitecturesAccuracyTest, ::testing::ValuesIn(kPresets),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string s = info.param;
                           for (char& ch : s) {
                             if (!absl::ascii_isalnum(ch)) ch = '_';
                           }
                           return s;
                         });

}  // namespace
}  // namespace weft

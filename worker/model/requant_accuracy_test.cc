// The default model re-quantized by llama.cpp's llama-quantize to Q4_K_M, Q6_K and Q5_0
// (mixed-type files: Q5_0, Q5_1, Q4_K, Q6_K, Q8_0 and F32 tensors) against llama.cpp's
// outputs on the same files (tests/testdata/requant_ref.json, made by
// tools/refdata/make_requant_ref.py with llama.cpp build 0c1e570):
//   * the file is the one the reference was made from (sha256), and Weft reads every
//     tensor in the type llama-quantize wrote;
//   * perplexity on tests/testdata/ppl_text.txt within 1 % of llama-perplexity's;
//   * greedy 32-token continuations of 15 prompts: on >= 14 of them identical or
//     diverging only where llama.cpp's top 3 holds Weft's token, and on average >= 10
//     tokens agreed before the first divergence.
// The files are made by tools/quant/full.sh (./test.sh --full) under
// $WEFT_REQUANT_DIR (default ~/.cache/weft/models/requant); without them the test skips.
// Runs the kernels `auto` picks on this CPU (int8 AVX2 / VNNI, or AMX with the int8
// kernels for the K formats).
#include <openssl/sha.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "common/gguf.h"
#include "common/tokenizer_test_util.h"
#include "gtest/gtest.h"
#include "worker/backends/cpu_backend.h"
#include "worker/model/testing/greedy_follow.h"
#include "worker/model/perplexity.h"

namespace weft {
namespace {

testing::JsonValue LoadJson(const std::string& name) {
  auto text = testing::ReadFile(testing::TestDataPath(name));
  EXPECT_TRUE(text.ok()) << text.status();
  auto v = testing::ParseJson(text.ok() ? *text : "{}");
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : testing::JsonValue();
}

std::string RequantDir() {
  if (const char* d = std::getenv("WEFT_REQUANT_DIR"); d != nullptr && *d != '\0') return d;
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : "") + "/.cache/weft/models/requant";
}

std::string FileSha256(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  std::vector<char> buf(1 << 20);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    SHA256_Update(&ctx, buf.data(), static_cast<size_t>(f.gcount()));
  }
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256_Final(digest, &ctx);
  std::string hex;
  char b[3];
  for (unsigned char c : digest) {
    std::snprintf(b, sizeof(b), "%02x", c);
    hex += b;
  }
  return hex;
}

class RequantAccuracyTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ref_ = LoadJson("requant_ref.json");
    const testing::JsonValue* models = ref_.Get("models");
    ASSERT_NE(models, nullptr);
    for (const testing::JsonValue& m : models->array) {
      if (m.Get("type")->str == GetParam()) model_ = &m;
    }
    ASSERT_NE(model_, nullptr) << "no reference for " << GetParam();
    path_ = RequantDir() + "/" + model_->Get("file")->str;
    if (!std::ifstream(path_).good()) {
      GTEST_SKIP() << path_ << " is missing: tools/quant/full.sh makes it (./test.sh --full)";
    }
    ASSERT_EQ(FileSha256(path_), model_->Get("sha256")->str)
        << path_ << " is not the file llama.cpp's references were made from";
    auto file = GgufFile::Open(path_);
    ASSERT_TRUE(file.ok()) << file.status();
    file_ = std::move(*file);
    CpuBackendOptions o;
    o.model.kernels = KernelChoice::kAuto;
    o.model.kv_dtype = KvDtype::kF16;
    o.model.num_threads = 2;
    o.num_kv_blocks = 512 / o.block_size;
    auto b = CpuBackend::Create(*file_, o);
    ASSERT_TRUE(b.ok()) << b.status();
    backend_ = std::move(*b);
  }

  testing::JsonValue ref_;
  const testing::JsonValue* model_ = nullptr;
  std::string path_;
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<CpuBackend> backend_;
};

TEST_P(RequantAccuracyTest, EveryTensorInItsOwnType) {
  std::map<std::string, int64_t> ours;
  for (const GgufTensor& t : file_->tensors()) ++ours[GgmlTypeName(static_cast<uint32_t>(t.type))];
  std::map<std::string, int64_t> theirs;
  for (const auto& [name, count] : model_->Get("tensor_types")->object) {
    theirs[name] = static_cast<int64_t>(count.number);
  }
  EXPECT_EQ(ours, theirs);
  std::printf("%s: kernels %s; tensor types:", GetParam().c_str(), backend_->kernels().c_str());
  for (const auto& [name, count] : ours) std::printf(" %s x %ld", name.c_str(), static_cast<long>(count));
  std::printf("\n");
}

TEST_P(RequantAccuracyTest, PerplexityWithinOnePercentOfLlamaCpp) {
  const std::vector<int32_t> tokens = LoadJson("llama_ref_topk.json").Get("tokens")->Ints();
  const double llama_ppl = model_->Get("llama_perplexity")->Get("ppl")->number;
  auto r = Perplexity(backend_.get(), tokens, PerplexityOptions());
  ASSERT_TRUE(r.ok()) << r.status();
  std::printf("%s: perplexity %.4f, llama-perplexity %.4f, ratio %.4f (%ld positions)\n",
              GetParam().c_str(), r->perplexity, llama_ppl, r->perplexity / llama_ppl,
              static_cast<long>(r->num_scored));
  RecordProperty("perplexity", std::to_string(r->perplexity));
  EXPECT_LE(r->perplexity, 1.01 * llama_ppl);
  EXPECT_GE(r->perplexity, 0.99 * llama_ppl);
}

TEST_P(RequantAccuracyTest, GreedyContinuationsMatchLlamaCppUpToItsTop3) {
  const testing::JsonValue& cases = *model_->Get("cases");
  ASSERT_EQ(cases.array.size(), 15u);
  std::vector<int32_t> table(backend_->num_kv_blocks());
  std::iota(table.begin(), table.end(), 0);
  int good = 0, identical = 0, total_agreed = 0;
  for (size_t c = 0; c < cases.array.size(); ++c) {
    const testing::JsonValue& cs = cases.array[c];
    const std::vector<int32_t> want = cs.Get("generated")->Ints();
    auto followed = testing::FollowGreedy(backend_.get(), table, cs.Get("prompt_ids")->Ints(), want);
    ASSERT_TRUE(followed.ok()) << followed.status();
    const int agreed = followed->agreed;
    bool ok = true;
    if (followed->diverged()) {
      const size_t i = agreed;
      const int32_t ours = followed->ours;
      const std::vector<int32_t> top3 = cs.Get("top_ids")->array[i].Ints();
      ok = std::find(top3.begin(), top3.end(), ours) != top3.end();
      std::printf("%s case %zu: diverges at step %zu: Weft %d, llama.cpp %d (top 3 %d %d %d)%s\n",
                  GetParam().c_str(), c, i, ours, want[i], top3[0], top3[1], top3[2],
                  ok ? "" : " NOT IN TOP 3");
    }
    total_agreed += agreed;
    identical += agreed == static_cast<int>(want.size());
    good += ok;
  }
  const double mean_prefix = static_cast<double>(total_agreed) / cases.array.size();
  std::printf("%s: %d of %zu continuations identical, %d of %zu within llama.cpp's top 3; "
              "mean agreed prefix %.1f tokens\n",
              GetParam().c_str(), identical, cases.array.size(), good, cases.array.size(),
              mean_prefix);
  EXPECT_GE(good, 14);
  EXPECT_GE(mean_prefix, 10.0);
}

INSTANTIATE_TEST_SUITE_P(Types, RequantAccuracyTest, ::testing::Values("Q4_K_M", "Q6_K", "Q5_0"));

}  // namespace
}  // namespace weft

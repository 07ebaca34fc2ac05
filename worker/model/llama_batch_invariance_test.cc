// Batch invariance of LlamaModel on the default model (criterion 3). Skips without it.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "worker/kv_cache.h"
#include "worker/model/llama_model.h"
#include "worker/model/testing/model_test_util.h"

namespace weft {
namespace {

using BatchInvarianceTest = testing::DefaultModelTest;
using testing::Compare;
using testing::RunSteps;
using testing::Scheduled;
using testing::Tokens;

// Criterion 3: a sequence's logits are bitwise identical alone and in a flattened batch
// with 15 other sequences of different lengths and phases (prefill chunks of many sizes,
// decodes), with different block ids, on every kernel path (fp32 KV) and on the default
// path with f16 and int8 KV caches. The reference kernels get smaller chunks to keep the
// test quick.
TEST_F(BatchInvarianceTest, BitwiseAloneAndIn16SequenceBatches) {
  constexpr int32_t kSteps = 5;
  Scheduled target;
  target.tokens = Tokens(24, 99);
  target.chunk = {13, 8, 1, 1, 1};  // prefill in two chunks, then three decodes
  std::vector<std::pair<KernelChoice, KvDtype>> paths;
  for (KernelChoice k : SupportedKernelChoices()) paths.emplace_back(k, KvDtype::kF32);
  paths.emplace_back(KernelChoice::kAuto, KvDtype::kF16);  // the served default
  paths.emplace_back(KernelChoice::kAuto, KvDtype::kInt8);
  for (const auto& [kernels, kv] : paths) {
    SCOPED_TRACE(std::string(KernelChoiceName(kernels)) + " kv " + KvDtypeName(kv));
    auto m = Model(kernels, kv);
    ASSERT_TRUE(m);
    auto cache = Cache(*m, 160);
    std::vector<Scheduled> alone = {target};
    alone[0].table = {0, 1};
    const auto want = RunSteps(m.get(), cache.get(), &alone, 0, kSteps);

    // 15 others: a warm-up step prefills those that decode later; then each step mixes
    // prefill chunks (0..23 tokens) and decodes. The target sits in the middle.
    std::vector<Scheduled> batch;
    std::mt19937 rng(5);
    int32_t next_block = 159;
    for (int32_t j = 0; j < 16; ++j) {
      Scheduled s;
      if (j == 7) {
        s = target;
        s.chunk.insert(s.chunk.begin(), 0);
      } else {
        const bool decoding = j % 3 == 0;
        const bool fast = kernels != KernelChoice::kReference;
        const int32_t warm = decoding ? 3 + (fast ? 5 : 2) * j : 0;
        s.chunk.push_back(warm);
        for (int32_t step = 0; step < kSteps; ++step) {
          s.chunk.push_back(decoding ? 1 : static_cast<int32_t>(rng() % (fast ? 24 : 10)));
        }
        const int32_t total = std::accumulate(s.chunk.begin(), s.chunk.end(), 0);
        s.tokens = Tokens(std::max(total, 1), 1000 + j);
      }
      const int32_t blocks = (static_cast<int32_t>(s.tokens.size()) + 15) / 16;
      for (int32_t b = 0; b < blocks; ++b) s.table.push_back(next_block--);  // descending ids
      batch.push_back(s);
    }
    ASSERT_GT(next_block, 1);
    const auto got = RunSteps(m.get(), cache.get(), &batch, 7, kSteps + 1);
    for (int32_t step = 1; step < kSteps; ++step) {
      ASSERT_FALSE(want[step].empty());
      ASSERT_EQ(got[step + 1].size(), want[step].size());
      EXPECT_EQ(std::memcmp(got[step + 1].data(), want[step].data(), 4 * want[step].size()), 0)
          << "step " << step << ": max diff " << Compare(got[step + 1], want[step]).max_abs_diff;
    }
  }
}

}  // namespace
}  // namespace weft

// Helpers for tests that run the default model (SmolLM2-135M Q4_1): a fixture that opens
// it (or skips), prefill and multi-step runners, and comparisons.
// Thread-safety: test code, single-threaded use.
#ifndef WEFT_WORKER_MODEL_TESTING_MODEL_TEST_UTIL_H_
#define WEFT_WORKER_MODEL_TESTING_MODEL_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/gguf.h"
#include "gtest/gtest.h"
#include "worker/kv_cache.h"
#include "worker/model/llama_model.h"

namespace weft::testing {

// Opens the default model in SetUp, or skips the test when it is absent.
class DefaultModelTest : public ::testing::Test {
 protected:
  void SetUp() override;
  // A model with 2 threads and the given kernels and KV type (nullptr after a test failure).
  std::unique_ptr<LlamaModel> Model(KernelChoice kernels, KvDtype kv_dtype = KvDtype::kF32);
  // A cache of the model's KV type with blocks of 16 tokens.
  std::unique_ptr<KvCache> Cache(const LlamaModel& m, int32_t num_blocks);

  std::string path_;
  std::unique_ptr<GgufFile> file_;
};

// Prefills `prompt` in chunks of `chunk` tokens through `table`; returns the logits of
// the last token (empty on failure).
std::vector<float> Prefill(LlamaModel* m, KvCache* cache, const std::vector<int32_t>& prompt,
                           const std::vector<int32_t>& table, int32_t chunk);

// first, first+1, ..., first+n-1.
std::vector<int32_t> Iota(int32_t first, int32_t n);

// n token ids in [300, 40000) from a seeded generator.
std::vector<int32_t> Tokens(int32_t n, uint32_t seed);

struct Error {
  float max_abs_diff = 0;
  float max_abs_ref = 0;
  float ratio() const { return max_abs_diff / max_abs_ref; }
};
Error Compare(const std::vector<float>& got, const std::vector<float>& want);

int32_t Argmax(const std::vector<float>& v);

// One sequence's schedule over several steps.
struct Scheduled {
  std::vector<int32_t> tokens;  // all tokens it will ever run
  std::vector<int32_t> table;   // its blocks
  std::vector<int32_t> chunk;   // tokens per step (0 = not scheduled)
  int32_t done = 0;             // tokens already run
};

// Runs `num_steps` steps of the schedules as flattened batches (every scheduled
// sequence wants logits); returns per step the logits of sequence `watch` (empty when
// it was not scheduled).
std::vector<std::vector<float>> RunSteps(LlamaModel* m, KvCache* cache,
                                         std::vector<Scheduled>* seqs, size_t watch,
                                         int32_t num_steps);

}  // namespace weft::testing

#endif  // WEFT_WORKER_MODEL_TESTING_MODEL_TEST_UTIL_H_

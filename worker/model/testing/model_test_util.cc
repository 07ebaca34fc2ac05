#include "worker/model/testing/model_test_util.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "common/testing/model_path.h"

namespace weft::testing {

void DefaultModelTest::SetUp() {
  path_ = FindModelFile();
  if (path_.empty()) GTEST_SKIP() << "default model not found (set WEFT_MODEL_DIR)";
  auto file = GgufFile::Open(path_);
  ASSERT_TRUE(file.ok()) << file.status();
  file_ = std::move(*file);
}

std::unique_ptr<LlamaModel> DefaultModelTest::Model(KernelChoice kernels, KvDtype kv_dtype) {
  LlamaModelOptions o;
  o.kernels = kernels;
  o.kv_dtype = kv_dtype;
  o.num_threads = 2;
  auto m = LlamaModel::Create(*file_, o);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

std::unique_ptr<KvCache> DefaultModelTest::Cache(const LlamaModel& m, int32_t num_blocks) {
  auto c = KvCache::Create(m.KvOptions(16, num_blocks));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

std::vector<float> Prefill(LlamaModel* m, KvCache* cache, const std::vector<int32_t>& prompt,
                           const std::vector<int32_t>& table, int32_t chunk) {
  ForwardOutput out;
  const int32_t n = static_cast<int32_t>(prompt.size());
  for (int32_t start = 0; start < n; start += chunk) {
    const int32_t len = std::min(chunk, n - start);
    ForwardBatch batch;
    batch.sequences.push_back({absl::MakeConstSpan(prompt).subspan(start, len), start,
                               absl::MakeConstSpan(table), start + len == n});
    const absl::Status s = m->Forward(batch, cache, &out);
    EXPECT_TRUE(s.ok()) << s;
  }
  if (out.num_rows != 1) return {};
  return std::vector<float>(out.Row(0), out.Row(0) + out.vocab_size);
}

std::vector<int32_t> Iota(int32_t first, int32_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}


Error Compare(const std::vector<float>& got, const std::vector<float>& want) {
  Error e;
  for (size_t i = 0; i < want.size(); ++i) {
    e.max_abs_diff = std::max(e.max_abs_diff, std::fabs(got[i] - want[i]));
    e.max_abs_ref = std::max(e.max_abs_ref, std::fabs(want[i]));
  }
  return e;
}

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

std::vector<int32_t> Tokens(int32_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(300, 40000);
  std::vector<int32_t> v(n);
  for (int32_t& t : v) t = id(rng);
  return v;
}

std::vector<std::vector<float>> RunSteps(LlamaModel* m, KvCache* cache,
                                         std::vector<Scheduled>* seqs, size_t watch,
                                         int32_t num_steps) {
  std::vector<std::vector<float>> watched(num_steps);
  ForwardOutput out;
  for (int32_t step = 0; step < num_steps; ++step) {
    ForwardBatch batch;
    for (Scheduled& s : *seqs) {
      const int32_t n = s.chunk[step];
      if (n == 0) {
        batch.sequences.push_back({});
        continue;
      }
      batch.sequences.push_back({absl::MakeConstSpan(s.tokens).subspan(s.done, n), s.done,
                                 absl::MakeConstSpan(s.table), true});
    }
    // Drop unscheduled placeholders but remember where `watch` went.
    ForwardBatch packed;
    int32_t watch_index = -1;
    for (size_t i = 0; i < batch.sequences.size(); ++i) {
      if (batch.sequences[i].token_ids.empty()) continue;
      if (i == watch) watch_index = static_cast<int32_t>(packed.sequences.size());
      packed.sequences.push_back(batch.sequences[i]);
    }
    const absl::Status st = m->Forward(packed, cache, &out);
    EXPECT_TRUE(st.ok()) << st;
    for (int32_t r = 0; r < out.num_rows; ++r) {
      if (out.row_sequence[r] == watch_index) {
        watched[step].assign(out.Row(r), out.Row(r) + out.vocab_size);
      }
    }
    for (Scheduled& s : *seqs) s.done += s.chunk[step];
  }
  return watched;
}

}  // namespace weft::testing

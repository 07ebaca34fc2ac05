// LlamaModel on small random GGUFs: every tensor type, fast vs reference kernels, tensor
// parallelism and malformed batches.
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include "common/gguf.h"
#include "gtest/gtest.h"
#include "worker/kv_cache.h"
#include "worker/model/llama_model.h"
#include "worker/model/testing/tiny_llama.h"

namespace weft {
namespace {

struct Tiny {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<KvCache> cache;
};

std::unique_ptr<Tiny> MakeTiny(const testing::TinyLlamaSpec& spec, LlamaModelOptions options,
                               int32_t num_blocks = 16) {
  auto t = std::make_unique<Tiny>();
  t->bytes = testing::BuildTinyLlama(spec);
  auto file = GgufFile::FromBuffer(t->bytes.data(), t->bytes.size());
  EXPECT_TRUE(file.ok()) << file.status();
  t->file = std::move(*file);
  auto model = LlamaModel::Create(*t->file, options);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  t->model = std::move(*model);
  auto cache = KvCache::Create(t->model->KvOptions(16, num_blocks));
  EXPECT_TRUE(cache.ok()) << cache.status();
  t->cache = std::move(*cache);
  return t;
}

LlamaModelOptions Options(KernelChoice kernels, int threads = 2) {
  LlamaModelOptions o;
  o.kernels = kernels;
  o.num_threads = threads;
  o.kv_dtype = KvDtype::kF32;  // the exact path
  return o;
}

const std::vector<int32_t> kPrompt = {3, 17, 42, 5, 79, 0, 11, 23, 64, 8, 31, 2, 50, 9, 70,
                                      4, 12, 33, 47, 1};
const std::vector<int32_t> kTable = {5, 2, 9};  // non-contiguous

// Prefills kPrompt in chunks of `chunk` and returns the last token's logits.
std::vector<float> Prefill(Tiny* t, int32_t chunk) {
  ForwardOutput out;
  for (int32_t start = 0; start < static_cast<int32_t>(kPrompt.size()); start += chunk) {
    const int32_t n = std::min<int32_t>(chunk, kPrompt.size() - start);
    ForwardBatch batch;
    batch.sequences.push_back({absl::MakeConstSpan(kPrompt).subspan(start, n), start,
                               absl::MakeConstSpan(kTable), start + n == int32_t(kPrompt.size())});
    const absl::Status s = t->model->Forward(batch, t->cache.get(), &out);
    EXPECT_TRUE(s.ok()) << s;
  }
  EXPECT_EQ(out.num_rows, 1);
  return std::vector<float>(out.Row(0), out.Row(0) + out.vocab_size);
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

const GgmlType kTypes[] = {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16,
                           GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0};

// The reference kernels compute with exactly dequantized weights: a model stored in any
// type gives the same bits as its F32 twin (same values stored as F32).
TEST(LlamaModelTinyTest, EveryTensorTypeMatchesItsF32TwinBitwise) {
  for (GgmlType type : kTypes) {
    for (bool tied : {false, true}) {
      SCOPED_TRACE(GgmlTypeName(uint32_t(type)) + std::string(tied ? " tied" : ""));
      testing::TinyLlamaSpec spec;
      spec.matrix_type = type;
      spec.tied = tied;
      auto typed = MakeTiny(spec, Options(KernelChoice::kReference));
      spec.f32_twin = true;
      auto twin = MakeTiny(spec, Options(KernelChoice::kReference));
      ASSERT_TRUE(typed && twin);
      const std::vector<float> a = Prefill(typed.get(), 20);
      const std::vector<float> b = Prefill(twin.get(), 20);
      ASSERT_EQ(a, b);
      ASSERT_GT(MaxAbs(a), 0.1f);
    }
  }
}

TEST(LlamaModelTinyTest, FastKernelsAgreeWithReference) {
  if (!kernels::MatmulSupported(kernels::MatmulImpl::kAvx512, GgmlType::kF32, 128)) {
    GTEST_SKIP() << "no AVX-512 on this CPU";
  }
  for (GgmlType type : kTypes) {
    testing::TinyLlamaSpec spec;
    spec.matrix_type = type;
    auto ref = MakeTiny(spec, Options(KernelChoice::kReference));
    ASSERT_TRUE(ref);
    const std::vector<float> a = Prefill(ref.get(), 7);
    for (KernelChoice k : SupportedKernelChoices()) {
      if (k == KernelChoice::kReference) continue;
      SCOPED_TRACE(GgmlTypeName(uint32_t(type)) + " " + KernelChoiceName(k));
      auto fast = MakeTiny(spec, Options(k));
      ASSERT_TRUE(fast);
      const bool packable = type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1 ||
                            type == GgmlType::kQ8_0;
      const Linear& wq = fast->model->weights().layers()[0].wq;
      EXPECT_EQ(wq.packed(), packable && k != KernelChoice::kAvx512);
      EXPECT_EQ(wq.wants_q8(), packable && IsInt8KernelChoice(k));
      EXPECT_EQ(wq.wants_bf16(), packable && k == KernelChoice::kAmx);
      const std::vector<float> b = Prefill(fast.get(), 7);
      // fp32 paths: rounding only. int8 paths: int8 activations (~1 % per matmul); AMX:
      // bf16 activations and weights (~0.4 %).
      const bool rounded = wq.wants_q8() || wq.wants_bf16();
      EXPECT_LE(MaxDiff(a, b), (rounded ? 5e-2f : 1e-4f) * MaxAbs(a));
    }
  }
}

// AllReducer for ranks living in threads of one process: sums in rank order.
class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size), bufs_(size) {}

  void Barrier() {
    std::unique_lock<std::mutex> lock(mu_);
    const int gen = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != gen; });
    }
  }

  absl::Status AllReduce(int rank, float* data, size_t count) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      bufs_[rank] = data;
    }
    Barrier();
    std::vector<float> sum(count, 0.0f);
    for (int r = 0; r < size_; ++r) {
      for (size_t i = 0; i < count; ++i) sum[i] += bufs_[r][i];
    }
    Barrier();
    std::copy(sum.begin(), sum.end(), data);
    return absl::OkStatus();
  }

  absl::Status AllGatherV(int rank, const float* in, const std::vector<size_t>& counts,
                          float* out) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_[rank] = in;
    }
    Barrier();
    size_t off = 0;
    for (int r = 0; r < size_; ++r) {
      std::copy(in_[r], in_[r] + counts[r], out + off);
      off += counts[r];
    }
    Barrier();
    return absl::OkStatus();
  }

  int size() const { return size_; }

 private:
  const int size_;
  std::vector<const float*> in_ = std::vector<const float*>(8);
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int generation_ = 0;
  std::vector<float*> bufs_;
};

class ThreadRankReducer : public AllReducer {
 public:
  ThreadRankReducer(ThreadGroup* group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return group_->size(); }
  absl::Status AllReduceSum(float* data, size_t count) override {
    return group_->AllReduce(rank_, data, count);
  }
  absl::Status AllGatherV(const float* in, size_t my_count, const std::vector<size_t>& counts,
                          float* out) override {
    if (counts[rank_] != my_count) return absl::InvalidArgumentError("counts");
    return group_->AllGatherV(rank_, in, counts, out);
  }

 private:
  ThreadGroup* const group_;
  const int rank_;
};

// Every architecture's extra tensors are sliced (Q/K/V biases) or replicated (QK norms,
// post-norms) per rank: two ranks give one rank's logits.
TEST(LlamaModelTinyTest, TensorParallelRanksMatchOneRank) {
  for (const char* arch : {"llama", "qwen2", "qwen3", "gemma3"}) {
  SCOPED_TRACE(arch);
  testing::TinyLlamaSpec spec;
  spec.architecture = arch;
  spec.matrix_type = GgmlType::kQ4_1;
  spec.num_heads = 6;  // 3 KV heads: 2 + 1 over two ranks
  spec.num_kv_heads = 3;
  spec.hidden = 192;
  if (spec.architecture == "gemma3") {
    spec.sliding_window = 9;  // cut by the 20-token prompt
    spec.swa_pattern = 2;
    spec.tied = true;
  }
  auto single = MakeTiny(spec, Options(KernelChoice::kAuto));
  ASSERT_TRUE(single);
  const std::vector<float> want = Prefill(single.get(), 8);
  ThreadGroup group(2);
  std::vector<std::unique_ptr<ThreadRankReducer>> reducers;
  std::vector<std::unique_ptr<Tiny>> ranks;
  for (int r = 0; r < 2; ++r) {
    reducers.push_back(std::make_unique<ThreadRankReducer>(&group, r));
    LlamaModelOptions o = Options(KernelChoice::kAuto, 1);
    o.all_reducer = reducers.back().get();
    ranks.push_back(MakeTiny(spec, o));
    ASSERT_TRUE(ranks.back());
    EXPECT_EQ(ranks.back()->model->shard().num_kv_heads(), r == 0 ? 2 : 1);
  }
  std::vector<std::vector<float>> got(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] { got[r] = Prefill(ranks[r].get(), 8); });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(got[0], got[1]);  // every rank holds the same bits
  EXPECT_LE(MaxDiff(got[0], want), 1e-4f * MaxAbs(want));
  }
}

TEST(LlamaModelTinyTest, RejectsMalformedBatchesWithoutWriting) {
  testing::TinyLlamaSpec spec;
  auto t = MakeTiny(spec, Options(KernelChoice::kReference), 4);
  ASSERT_TRUE(t);
  const std::vector<int32_t> good_tokens = {1, 2, 3};
  const std::vector<int32_t> bad_tokens = {1, 80, 3};
  const std::vector<int32_t> table = {1};
  const std::vector<int32_t> bad_table = {4};
  const std::vector<int32_t> empty;
  ForwardOutput out;
  auto run = [&](absl::Span<const int32_t> tokens, int32_t start,
                 absl::Span<const int32_t> blocks) {
    ForwardBatch batch;
    batch.sequences.push_back({good_tokens, 0, table, true});  // valid neighbour
    batch.sequences.push_back({tokens, start, blocks, true});
    return t->model->Forward(batch, t->cache.get(), &out).code();
  };
  EXPECT_EQ(run(bad_tokens, 0, table), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run(good_tokens, 0, bad_table), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run(good_tokens, 14, table), absl::StatusCode::kInvalidArgument);  // needs 2 blocks
  EXPECT_EQ(run(empty, 0, table), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run(good_tokens, -1, table), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run(good_tokens, 510, table), absl::StatusCode::kInvalidArgument);  // context
  for (int32_t b = 0; b < 4; ++b) {
    const float* data = t->cache->BlockData(BlockId(b));
    for (int64_t i = 0; i < t->cache->floats_per_block(); ++i) ASSERT_EQ(data[i], 0.0f);
  }
  // A cache of another shape is refused.
  KvPoolOptions other = t->model->KvOptions(16, 4);
  other.num_kv_heads = 1;
  auto wrong = KvCache::Create(other);
  ASSERT_TRUE(wrong.ok());
  ForwardBatch batch;
  batch.sequences.push_back({good_tokens, 0, table, true});
  EXPECT_EQ(t->model->Forward(batch, wrong->get(), &out).code(),
            absl::StatusCode::kFailedPrecondition);
  // An empty batch is fine and produces no rows.
  EXPECT_TRUE(t->model->Forward(ForwardBatch{}, t->cache.get(), &out).ok());
  EXPECT_EQ(out.num_rows, 0);
}

}  // namespace
}  // namespace weft

// Paged decode attention on CPU at the default model's shape (9 query heads, 3 KV heads,
// head_dim 64, blocks of 16): `batch` sequences of `context` tokens each, one decode
// query per sequence, every (sequence, kv head) attended on one thread. Reports the KV
// bytes read per second (the roofline for decode attention is memory bandwidth: compare
// with weft_forward_bench's "memory read bandwidth" line) and GFLOP/s (2 x 2 x heads x
// head_dim x context per sequence).
//   bazel run -c opt //kernels:cpu_paged_attention_benchmark
#include <numeric>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cpu/paged_attention.h"

namespace weft::kernels {
namespace {

constexpr int32_t kHeads = 9, kKvHeads = 3, kHeadDim = 64, kBlock = 16;

void BM_DecodeAttention(benchmark::State& state, KvDtype dtype) {
  const int32_t batch = static_cast<int32_t>(state.range(0));
  const int32_t context = static_cast<int32_t>(state.range(1));
  const AttentionImpl impl = BestAttentionImpl(kBlock, kHeadDim);
  const int32_t blocks_per_seq = (context + kBlock - 1) / kBlock;
  const int64_t tile = KvTileBytes(dtype, kHeadDim, kBlock);
  const int64_t block_bytes = 2 * kKvHeads * tile;
  std::vector<uint8_t> pool(static_cast<size_t>(block_bytes) * batch * blocks_per_seq);
  PagedKvLayer kv;
  kv.dtype = dtype;
  kv.k = pool.data();
  kv.v = pool.data() + kKvHeads * tile;
  kv.block_stride = block_bytes;
  kv.head_stride = tile;
  kv.block_size = kBlock;
  kv.num_kv_heads = kKvHeads;
  kv.head_dim = kHeadDim;
  // Fill through the real write path.
  std::mt19937 rng(1);
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::vector<float> k(kKvHeads * kHeadDim), v(kKvHeads * kHeadDim);
  std::vector<int32_t> tables(static_cast<size_t>(batch) * blocks_per_seq);
  std::iota(tables.begin(), tables.end(), 0);
  std::shuffle(tables.begin(), tables.end(), rng);
  for (int32_t s = 0; s < batch; ++s) {
    for (int32_t p = 0; p < context; ++p) {
      for (float& x : k) x = val(rng);
      for (float& x : v) x = val(rng);
      const int64_t slot = int64_t{tables[s * blocks_per_seq + p / kBlock]} * kBlock + p % kBlock;
      WritePagedKv(kv, k.data(), v.data(), kKvHeads * kHeadDim, &slot, 0, 1);
    }
  }
  std::vector<float> q(static_cast<size_t>(batch) * kHeads * kHeadDim), out(q.size());
  for (float& x : q) x = val(rng);
  AttentionParams params;
  params.num_heads = kHeads;
  params.scale = 0.125f;
  for (auto _ : state) {
    for (int32_t s = 0; s < batch; ++s) {
      params.kv_head_begin = 0;
      params.kv_head_end = kKvHeads;
      PagedDecodeAttention(impl, q.data() + s * kHeads * kHeadDim, kv,
                           tables.data() + s * blocks_per_seq, context, params,
                           out.data() + s * kHeads * kHeadDim);
    }
    benchmark::DoNotOptimize(out.data());
  }
  const double kv_bytes = static_cast<double>(batch) * context * 2 * kKvHeads *
                          (static_cast<double>(tile) / kBlock);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kv_bytes));
  state.counters["GFLOP/s"] = benchmark::Counter(
      1e-9 * state.iterations() * batch * 4.0 * kHeads * kHeadDim * context,
      benchmark::Counter::kIsRate);
  state.SetLabel(std::string(AttentionImplName(impl)) + " " + KvDtypeName(dtype));
}

void Shapes(benchmark::internal::Benchmark* b) {
  for (int64_t batch : {1, 16, 64, 256}) b->Args({batch, 192});
  for (int64_t ctx : {1024, 4096}) b->Args({1, ctx});
  b->Args({64, 1024});
}

BENCHMARK_CAPTURE(BM_DecodeAttention, f16, KvDtype::kF16)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_DecodeAttention, f32, KvDtype::kF32)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_DecodeAttention, bf16, KvDtype::kBf16)->Args({64, 192});
BENCHMARK_CAPTURE(BM_DecodeAttention, int8, KvDtype::kInt8)->Args({64, 192});

}  // namespace
}  // namespace weft::kernels

BENCHMARK_MAIN();

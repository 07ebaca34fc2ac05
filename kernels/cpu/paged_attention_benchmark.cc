// Paged decode attention on CPU at the default model's shape (9 query heads, 3 KV heads,
// head_dim 64, blocks of 16): `batch` sequences of `context` tokens each, one decode
// query per sequence, every (sequence, kv head) attended on one thread. Reports the KV
// bytes read per second (the roofline for decode attention is memory bandwidth: compare
// with weft_forward_bench's "memory read bandwidth" line) and GFLOP/s (2 x 2 x heads x
// head_dim x context per sequence).
//   bazel run -c opt //kernels:cpu_paged_attention_benchmark
#include <algorithm>
#include <numeric>
#include <string>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cpu/paged_attention.h"

namespace weft::kernels {
namespace {

constexpr int32_t kHeads = 9, kKvHeads = 3, kHeadDim = 64, kBlock = 16;

// `batch` sequences of `context` tokens written through the real write path, with their
// block tables and query rows.
struct Pool {
  int32_t blocks_per_seq = 0;
  int64_t tile = 0;
  std::vector<uint8_t> bytes;
  PagedKvLayer kv;
  std::vector<int32_t> tables;
  std::vector<float> q;  // context query rows of batch sequences
};

Pool MakePool(KvDtype dtype, int32_t batch, int32_t context) {
  Pool p;
  p.blocks_per_seq = (context + kBlock - 1) / kBlock;
  p.tile = KvTileBytes(dtype, kHeadDim, kBlock);
  const int64_t block_bytes = 2 * kKvHeads * p.tile;
  p.bytes.resize(static_cast<size_t>(block_bytes) * batch * p.blocks_per_seq);
  PagedKvLayer& kv = p.kv;
  kv.dtype = dtype;
  kv.k = p.bytes.data();
  kv.v = p.bytes.data() + kKvHeads * p.tile;
  kv.block_stride = block_bytes;
  kv.head_stride = p.tile;
  kv.block_size = kBlock;
  kv.num_kv_heads = kKvHeads;
  kv.head_dim = kHeadDim;
  std::mt19937 rng(1);
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::vector<float> k(kKvHeads * kHeadDim), v(kKvHeads * kHeadDim);
  p.tables.resize(static_cast<size_t>(batch) * p.blocks_per_seq);
  std::iota(p.tables.begin(), p.tables.end(), 0);
  std::shuffle(p.tables.begin(), p.tables.end(), rng);
  for (int32_t s = 0; s < batch; ++s) {
    for (int32_t t = 0; t < context; ++t) {
      for (float& x : k) x = val(rng);
      for (float& x : v) x = val(rng);
      const int64_t slot = int64_t{p.tables[s * p.blocks_per_seq + t / kBlock]} * kBlock + t % kBlock;
      WritePagedKv(kv, k.data(), v.data(), kKvHeads * kHeadDim, &slot, 0, 1);
    }
  }
  p.q.resize(static_cast<size_t>(batch) * context * kHeads * kHeadDim);
  for (float& x : p.q) x = val(rng);
  return p;
}

void BM_DecodeAttention(benchmark::State& state, KvDtype dtype, AttentionImpl impl) {
  const int32_t batch = static_cast<int32_t>(state.range(0));
  const int32_t context = static_cast<int32_t>(state.range(1));
  if (!AttentionSupported(impl, kBlock, kHeadDim)) {
    state.SkipWithError("unsupported here");
    return;
  }
  Pool pool = MakePool(dtype, batch, context);
  const int32_t blocks_per_seq = pool.blocks_per_seq;
  const int64_t tile = pool.tile;
  const PagedKvLayer& kv = pool.kv;
  const std::vector<int32_t>& tables = pool.tables;
  // One decode query per sequence: its last token's row.
  std::vector<float> q(static_cast<size_t>(batch) * kHeads * kHeadDim), out(q.size());
  for (int32_t s = 0; s < batch; ++s) {
    std::copy_n(pool.q.data() + (int64_t{s} * context + context - 1) * kHeads * kHeadDim,
                kHeads * kHeadDim, q.data() + int64_t{s} * kHeads * kHeadDim);
  }
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

// One prompt of `context` tokens prefilled at once (causal), every kv head on one thread
// (the query rows of the whole prompt; the model splits them into work items of 32).
void BM_PrefillAttention(benchmark::State& state, KvDtype dtype, AttentionImpl impl) {
  const int32_t context = static_cast<int32_t>(state.range(0));
  if (!AttentionSupported(impl, kBlock, kHeadDim)) {
    state.SkipWithError("unsupported here");
    return;
  }
  Pool pool = MakePool(dtype, 1, context);
  std::vector<float> out(pool.q.size());
  AttentionParams params;
  params.num_heads = kHeads;
  params.scale = 0.125f;
  params.kv_head_begin = 0;
  params.kv_head_end = kKvHeads;
  const int64_t width = kHeads * kHeadDim;
  for (auto _ : state) {
    PagedPrefillAttention(impl, pool.q.data(), width, 0, 0, context, pool.kv, pool.tables.data(),
                          params, out.data(), width);
    benchmark::DoNotOptimize(out.data());
  }
  // Causal: token t attends to t + 1 keys.
  state.counters["GFLOP/s"] = benchmark::Counter(
      1e-9 * state.iterations() * 4.0 * kHeads * kHeadDim * (static_cast<double>(context) * (context + 1) / 2),
      benchmark::Counter::kIsRate);
  state.SetLabel(std::string(AttentionImplName(impl)) + " " + KvDtypeName(dtype));
}

void Shapes(benchmark::internal::Benchmark* b) {
  for (int64_t batch : {1, 16, 64, 256}) b->Args({batch, 192});
  for (int64_t ctx : {1024, 4096}) b->Args({1, ctx});
  b->Args({64, 1024});
}

BENCHMARK_CAPTURE(BM_DecodeAttention, f16, KvDtype::kF16, AttentionImpl::kAvx512)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_DecodeAttention, int8_vnni, KvDtype::kInt8, AttentionImpl::kAvx512Vnni)
    ->Apply(Shapes);
BENCHMARK_CAPTURE(BM_DecodeAttention, f32, KvDtype::kF32, AttentionImpl::kAvx512)->Args({64, 192});
BENCHMARK_CAPTURE(BM_DecodeAttention, bf16, KvDtype::kBf16, AttentionImpl::kAvx512)->Args({64, 192});
BENCHMARK_CAPTURE(BM_DecodeAttention, int8_widened, KvDtype::kInt8, AttentionImpl::kAvx512)
    ->Args({64, 192});
BENCHMARK_CAPTURE(BM_PrefillAttention, f16, KvDtype::kF16, AttentionImpl::kAvx512)->Arg(512);
BENCHMARK_CAPTURE(BM_PrefillAttention, int8_vnni, KvDtype::kInt8, AttentionImpl::kAvx512Vnni)
    ->Arg(512);

}  // namespace
}  // namespace weft::kernels

BENCHMARK_MAIN();

// Decode attention throughput on a GPU (manual, tagged "manual"): batch 64 x context 2K
// by default, timed with CUDA events around one launch (split kernel + reduction), and
// reported as bytes moved per second: K and V of every context token (plus int8
// scales), the queries and the outputs. Compare with the HBM bandwidth (H100 SXM about
// 3.35 TB/s, H200 about 4.8 TB/s).
//
//   bazel run --config=cuda -c opt //kernels/cuda:paged_attention_benchmark
//   ... -- --benchmark_filter='bf16' --benchmark_min_time=0.5s
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "benchmark/benchmark.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/paged_attention.h"

namespace weft::kernels::cuda {
namespace {

struct Shape {
  const char* name;
  int32_t num_kv_heads, group, head_dim;
  KvDtype dtype;
};

const Shape kShapes[] = {
    {"llama8b_bf16", 8, 4, 128, KvDtype::kBf16},  // 32 heads, 8 KV heads (GQA 4)
    {"llama8b_int8", 8, 4, 128, KvDtype::kInt8},
    {"llama70b_tp8_bf16", 1, 8, 128, KvDtype::kBf16},  // one KV head per rank, GQA 8
    {"smollm_bf16", 3, 3, 64, KvDtype::kBf16},
    {"mha_fp16", 32, 1, 128, KvDtype::kF16},
};

#define BENCH_CUDA(expr)                                                        \
  do {                                                                          \
    const cudaError_t e_ = (expr);                                              \
    if (e_ != cudaSuccess) {                                                    \
      state.SkipWithError((std::string(#expr) + ": " + cudaGetErrorString(e_)).c_str()); \
      return;                                                                   \
    }                                                                           \
  } while (0)

void BM_PagedDecodeAttention(benchmark::State& state) {
  const Shape& sh = kShapes[state.range(0)];
  const int32_t batch = static_cast<int32_t>(state.range(1));
  const int32_t ctx = static_cast<int32_t>(state.range(2));
  if (CudaDeviceCount() == 0) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int32_t bs = 16;
  const int32_t blocks_per_seq = (ctx + bs - 1) / bs;
  const int32_t num_blocks = batch * blocks_per_seq;
  const int32_t heads = sh.num_kv_heads * sh.group;
  const int64_t elems = int64_t{sh.num_kv_heads} * bs * sh.head_dim;  // per K or V per block
  const int32_t es = KvElementBytes(sh.dtype);
  const bool int8 = sh.dtype == KvDtype::kInt8;
  const int64_t block_bytes = 2 * elems * es + (int8 ? 2 * (elems / 8) * 2 : 0);
  void* pool = nullptr;
  BENCH_CUDA(cudaMalloc(&pool, block_bytes * num_blocks));
  BENCH_CUDA(cudaMemset(pool, 0, block_bytes * num_blocks));  // zeros: finite everywhere
  PagedKvView kv;
  kv.k = pool;
  kv.v = static_cast<uint8_t*>(pool) + elems * es;
  if (int8) {
    kv.k_scale = reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(pool) + 2 * elems * es);
    kv.v_scale = kv.k_scale + elems / 8;
  }
  kv.block_stride = block_bytes / es;
  kv.scale_block_stride = block_bytes / 2;
  kv.block_size = bs;
  kv.num_kv_heads = sh.num_kv_heads;
  kv.head_dim = sh.head_dim;
  kv.dtype = sh.dtype;
  // Shuffled block tables (pages scattered over the pool, as in serving).
  std::vector<int32_t> table(num_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(1));
  std::vector<int32_t> offsets(batch), lens(batch, ctx);
  for (int32_t i = 0; i < batch; ++i) offsets[i] = i * blocks_per_seq;
  int32_t *d_table, *d_offsets, *d_lens;
  float *q, *out, *ws;
  const int64_t qw = int64_t{heads} * sh.head_dim;
  int num_sms = 0;
  BENCH_CUDA(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0));
  DecodeAttentionArgs a;
  a.partition_size = ChooseDecodePartition(batch, sh.num_kv_heads, sh.group, bs, ctx, num_sms);
  a.max_splits = DecodeNumSplits(ctx, a.partition_size);
  BENCH_CUDA(cudaMalloc(reinterpret_cast<void**>(&d_table), num_blocks * 4));
  BENCH_CUDA(cudaMalloc(reinterpret_cast<void**>(&d_offsets), batch * 4));
  BENCH_CUDA(cudaMalloc(reinterpret_cast<void**>(&d_lens), batch * 4));
  BENCH_CUDA(cudaMalloc(reinterpret_cast<void**>(&q), batch * qw * 4));
  BENCH_CUDA(cudaMalloc(reinterpret_cast<void**>(&out), batch * qw * 4));
  BENCH_CUDA(cudaMalloc(reinterpret_cast<void**>(&ws), DecodeWorkspaceFloats(batch, heads, sh.head_dim, a.max_splits) * 4));
  BENCH_CUDA(cudaMemcpy(d_table, table.data(), num_blocks * 4, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(d_offsets, offsets.data(), batch * 4, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(d_lens, lens.data(), batch * 4, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemset(q, 0, batch * qw * 4));
  a.q = q;
  a.q_stride = qw;
  a.out = out;
  a.out_stride = qw;
  a.out_dtype = ActDtype::kF32;
  a.context_lens = d_lens;
  a.block_tables = d_table;
  a.block_table_offsets = d_offsets;
  a.num_items = batch;
  a.num_heads = heads;
  a.scale = 1.0f / std::sqrt(static_cast<float>(sh.head_dim));
  a.workspace = ws;
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  BENCH_CUDA(PagedDecodeAttention(a, kv, nullptr));  // warm-up
  BENCH_CUDA(cudaDeviceSynchronize());
  for (auto _ : state) {
    BENCH_CUDA(cudaEventRecord(start));
    BENCH_CUDA(PagedDecodeAttention(a, kv, nullptr));
    BENCH_CUDA(cudaEventRecord(stop));
    BENCH_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms / 1e3);
  }
  const int64_t kv_bytes = int64_t{batch} * ctx * sh.num_kv_heads * sh.head_dim * 2 * es +
                           (int8 ? int64_t{batch} * ctx * sh.num_kv_heads * (sh.head_dim / 8) * 2 * 2
                                 : 0);
  const int64_t bytes = kv_bytes + 2 * int64_t{batch} * qw * 4;
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["splits"] = a.max_splits;
  state.counters["partition"] = a.partition_size;
  state.SetLabel(sh.name);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(pool);
  cudaFree(d_table);
  cudaFree(d_offsets);
  cudaFree(d_lens);
  cudaFree(q);
  cudaFree(out);
  cudaFree(ws);
}

void Args(benchmark::internal::Benchmark* b) {
  for (int s = 0; s < static_cast<int>(sizeof(kShapes) / sizeof(kShapes[0])); ++s) {
    b->Args({s, 64, 2048});  // the reference point: batch 64 x context 2K
  }
  b->Args({0, 1, 8192});     // one long sequence: split-K matters
  b->Args({0, 256, 512});
  b->Args({3, 1, 2048});
}

BENCHMARK(BM_PagedDecodeAttention)->Apply(Args)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace weft::kernels::cuda

BENCHMARK_MAIN();

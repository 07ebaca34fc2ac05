// Paged attention throughput on a GPU (manual, tagged "manual"; ../shared/gpu/check.sh
// runs it with --benchmark_min_time=0.2 and keeps the BM_ lines).
//
// BM_PagedDecodeAttention/<shape>/<batch>/<context>/<kernel>/<bucket>: one decode launch
// (kernel 1: kPipelined, the default; 2: kGrouped, the group-shared / tensor-core kernel;
// 0: kSplitV1, the first kernel; every row for each, for A/B) planned for a context of
// <bucket> tokens (a CUDA graph's context bucket; = <context> when eager) — kGrouped cuts
// its splits from the real contexts on the device, as the backend runs it —, timed with
// CUDA events, reported as the bytes it must move — K and V of every context token
// (plus int8 scales), the queries and the outputs — per second ("GB/s") and as a
// fraction of the card's copy roofline ("roofline%"; WEFT_ROOFLINE_GBPS, default 3000:
// the H100's device-to-device copy, read + write, which check.sh also measures).
// BM_PagedPrefillAttention/<shape>/<prompt>/<kernel>: one causal prefill of a whole
// prompt (kernel 1: tensor cores, 0: CUDA cores), in TFLOP/s (2 * 2 * d per visible
// query-key pair).
// Queries and KV are random (never zeros): normal values as bf16/fp16, or random int8
// with fp16 scales, in 64 distinct random blocks repeated over the pool; block tables
// are shuffled (pages scattered over the pool, as in serving).
//
//   bazel run --config=cuda -c opt //kernels/cuda:paged_attention_benchmark
//   ... -- --benchmark_filter='llama8b' --benchmark_min_time=0.5s
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "benchmark/benchmark.h"
#include "common/ggml_types.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/testing/bench_util.h"
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
    {"llama8b_fp16", 8, 4, 128, KvDtype::kF16},
};

using testing::Device;
using testing::RooflineGbps;

// One layer's pool of `blocks` blocks (layout of kv_reference.h: per block K then V
// data, then for int8 K then V scales) filled with random values, and its view.
cudaError_t MakeRandomPool(const Shape& sh, int32_t block_size, int64_t blocks, Device* pool,
                           PagedKvView* kv) {
  const int64_t elems = int64_t{sh.num_kv_heads} * block_size * sh.head_dim;  // per K or V
  const int32_t es = KvElementBytes(sh.dtype);
  const bool int8 = sh.dtype == KvDtype::kInt8;
  const int64_t block_bytes = 2 * elems * es + (int8 ? 2 * (elems / 8) * 2 : 0);
  cudaError_t e = cudaMalloc(&pool->p, block_bytes * blocks);
  if (e != cudaSuccess) return e;
  const int64_t distinct = std::min<int64_t>(blocks, 64);
  std::vector<uint8_t> image(block_bytes * distinct);
  std::mt19937 rng(12345);
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::uniform_int_distribution<int> q8(-127, 127);
  std::uniform_real_distribution<float> scale(0.005f, 0.03f);
  for (int64_t b = 0; b < distinct; ++b) {
    uint8_t* blk = image.data() + b * block_bytes;
    if (int8) {
      for (int64_t i = 0; i < 2 * elems; ++i) blk[i] = static_cast<uint8_t>(q8(rng));
      uint16_t* s = reinterpret_cast<uint16_t*>(blk + 2 * elems);
      for (int64_t i = 0; i < 2 * (elems / 8); ++i) s[i] = Fp32ToFp16(scale(rng));
    } else {
      uint16_t* h = reinterpret_cast<uint16_t*>(blk);
      for (int64_t i = 0; i < 2 * elems; ++i) {
        h[i] = sh.dtype == KvDtype::kBf16 ? Fp32ToBf16(val(rng)) : Fp32ToFp16(val(rng));
      }
    }
  }
  e = cudaMemcpy(pool->p, image.data(), image.size(), cudaMemcpyHostToDevice);
  for (int64_t done = distinct; e == cudaSuccess && done < blocks;) {  // double the filled part
    const int64_t n = std::min(done, blocks - done);
    e = cudaMemcpy(pool->as<uint8_t>() + done * block_bytes, pool->p, n * block_bytes,
                   cudaMemcpyDeviceToDevice);
    done += n;
  }
  kv->k = pool->p;
  kv->v = pool->as<uint8_t>() + elems * es;
  if (int8) {
    kv->k_scale = reinterpret_cast<uint16_t*>(pool->as<uint8_t>() + 2 * elems * es);
    kv->v_scale = kv->k_scale + elems / 8;
  }
  kv->block_stride = block_bytes / es;
  kv->scale_block_stride = block_bytes / 2;
  kv->block_size = block_size;
  kv->num_kv_heads = sh.num_kv_heads;
  kv->head_dim = sh.head_dim;
  kv->dtype = sh.dtype;
  return e;
}

cudaError_t UploadRandomFloats(int64_t n, uint32_t seed, Device* d) {
  std::vector<float> h(n);
  std::mt19937 rng(seed);
  std::normal_distribution<float> val(0.0f, 1.0f);
  for (float& x : h) x = val(rng);
  cudaError_t e = cudaMalloc(&d->p, n * 4);
  return e != cudaSuccess ? e : cudaMemcpy(d->p, h.data(), n * 4, cudaMemcpyHostToDevice);
}

template <typename T>
cudaError_t Upload(const std::vector<T>& v, Device* d) {
  cudaError_t e = cudaMalloc(&d->p, v.size() * sizeof(T));
  return e != cudaSuccess ? e : cudaMemcpy(d->p, v.data(), v.size() * sizeof(T),
                                           cudaMemcpyHostToDevice);
}

void BM_PagedDecodeAttention(benchmark::State& state) {
  const Shape& sh = kShapes[state.range(0)];
  const int32_t batch = static_cast<int32_t>(state.range(1));
  const int32_t ctx = static_cast<int32_t>(state.range(2));
  const DecodeKernel kernel = static_cast<DecodeKernel>(state.range(3));
  const int32_t bucket = static_cast<int32_t>(state.range(4));
  state.SetLabel(std::string(sh.name) + " " + DecodeKernelName(kernel));
  if (CudaDeviceCount() == 0) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int32_t bs = 16;
  const int32_t blocks_per_seq = (ctx + bs - 1) / bs;
  const int32_t num_blocks = batch * blocks_per_seq;
  const int32_t heads = sh.num_kv_heads * sh.group;
  const int64_t qw = int64_t{heads} * sh.head_dim;
  Device pool, q, out, ws, counters, d_table, d_offsets, d_lens;
  PagedKvView kv;
  BENCH_CUDA(MakeRandomPool(sh, bs, num_blocks, &pool, &kv));
  std::vector<int32_t> table(num_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(1));
  std::vector<int32_t> offsets(batch), lens(batch, ctx);
  for (int32_t i = 0; i < batch; ++i) offsets[i] = i * blocks_per_seq;
  int num_sms = 0;
  BENCH_CUDA(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0));
  DecodeShape ds;
  ds.num_items = batch;
  ds.num_kv_heads = sh.num_kv_heads;
  ds.group_size = sh.group;
  ds.head_dim = sh.head_dim;
  ds.block_size = bs;
  ds.max_context = bucket;
  ds.num_sms = num_sms;
  ds.dtype = sh.dtype;
  const DecodePlan plan = PlanDecode(kernel, ds);
  BENCH_CUDA(Upload(table, &d_table));
  BENCH_CUDA(Upload(offsets, &d_offsets));
  BENCH_CUDA(Upload(lens, &d_lens));
  BENCH_CUDA(UploadRandomFloats(batch * qw, 7, &q));
  BENCH_CUDA(cudaMalloc(&out.p, batch * qw * 4));
  BENCH_CUDA(cudaMalloc(&ws.p, plan.workspace_floats * 4));
  const int64_t counter_bytes = DecodeSplitCounters(batch, sh.num_kv_heads) * 4;
  BENCH_CUDA(cudaMalloc(&counters.p, counter_bytes));
  BENCH_CUDA(cudaMemset(counters.p, 0, counter_bytes));  // zero before the first launch
  DecodeAttentionArgs a;
  a.q = q.as<float>();
  a.q_stride = qw;
  a.out = out.p;
  a.out_stride = qw;
  a.out_dtype = ActDtype::kF32;
  a.context_lens = d_lens.as<int32_t>();
  a.block_tables = d_table.as<int32_t>();
  a.block_table_offsets = d_offsets.as<int32_t>();
  a.num_items = batch;
  a.num_heads = heads;
  a.scale = 1.0f / std::sqrt(static_cast<float>(sh.head_dim));
  a.partition_size = plan.partition_size;
  a.max_splits = plan.max_splits;
  if (kernel == DecodeKernel::kGrouped) a.device_min_partition = kDecodeDeviceMinPartition;
  a.workspace = ws.as<float>();
  a.split_counters = counters.as<int32_t>();
  a.kernel = kernel;
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  BENCH_CUDA(PagedDecodeAttention(a, kv, nullptr));  // warm-up
  BENCH_CUDA(cudaDeviceSynchronize());
  double seconds = 0;
  for (auto _ : state) {
    BENCH_CUDA(cudaEventRecord(start));
    BENCH_CUDA(PagedDecodeAttention(a, kv, nullptr));
    BENCH_CUDA(cudaEventRecord(stop));
    BENCH_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms / 1e3);
    seconds += ms / 1e3;
  }
  const bool int8 = sh.dtype == KvDtype::kInt8;
  const int64_t kv_bytes =
      int64_t{batch} * ctx * sh.num_kv_heads *
      (sh.head_dim * 2 * KvElementBytes(sh.dtype) + (int8 ? (sh.head_dim / 8) * 2 * 2 : 0));
  const int64_t bytes = kv_bytes + 2 * int64_t{batch} * qw * 4;
  state.SetBytesProcessed(state.iterations() * bytes);
  const double gbps = seconds > 0 ? state.iterations() * bytes / seconds / 1e9 : 0;
  state.counters["GB/s"] = gbps;
  state.counters["roofline%"] = 100.0 * gbps / RooflineGbps();
  state.counters["splits"] = a.max_splits;
  state.counters["partition"] = a.device_min_partition > 0 ? 0 : a.partition_size;  // 0: per item
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

void BM_PagedPrefillAttention(benchmark::State& state) {
  const Shape& sh = kShapes[state.range(0)];
  const int32_t n = static_cast<int32_t>(state.range(1));
  const bool tc = state.range(2) != 0;
  state.SetLabel(std::string(sh.name) + (tc ? " tensor_cores" : " cuda_cores"));
  if (CudaDeviceCount() == 0) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int32_t bs = 16;
  const int32_t blocks = (n + bs - 1) / bs;
  const int32_t heads = sh.num_kv_heads * sh.group;
  const int64_t qw = int64_t{heads} * sh.head_dim;
  Device pool, q, out, d_table, d_zero, d_n, d_offsets, d_tile_seq, d_tile_q;
  PagedKvView kv;
  BENCH_CUDA(MakeRandomPool(sh, bs, blocks, &pool, &kv));
  std::vector<int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(2));
  std::vector<int32_t> tile_seq, tile_q;
  const std::vector<int32_t> num = {n};
  BuildPrefillTiles(num.data(), 1, tc ? PrefillTcTileTokens(sh.group)
                                      : PrefillTileTokens(sh.group, sh.head_dim),
                    &tile_seq, &tile_q);
  BENCH_CUDA(Upload(table, &d_table));
  BENCH_CUDA(Upload(std::vector<int32_t>{0}, &d_zero));
  BENCH_CUDA(Upload(num, &d_n));
  BENCH_CUDA(Upload(tile_seq, &d_tile_seq));
  BENCH_CUDA(Upload(tile_q, &d_tile_q));
  BENCH_CUDA(UploadRandomFloats(n * qw, 9, &q));
  BENCH_CUDA(cudaMalloc(&out.p, n * qw * 2));
  PrefillAttentionArgs a;
  a.q = q.as<float>();
  a.q_stride = qw;
  a.out = out.p;
  a.out_stride = qw;
  a.out_dtype = ActDtype::kBf16;
  a.seq_q_start = d_zero.as<int32_t>();
  a.seq_start_pos = d_zero.as<int32_t>();
  a.seq_num_tokens = d_n.as<int32_t>();
  a.block_tables = d_table.as<int32_t>();
  a.block_table_offsets = d_zero.as<int32_t>();
  a.tile_seq = d_tile_seq.as<int32_t>();
  a.tile_q_begin = d_tile_q.as<int32_t>();
  a.num_tiles = static_cast<int32_t>(tile_seq.size());
  a.num_heads = heads;
  a.scale = 1.0f / std::sqrt(static_cast<float>(sh.head_dim));
  auto launch = [&] {
    return tc ? PagedPrefillAttentionTc(a, kv, nullptr) : PagedPrefillAttention(a, kv, nullptr);
  };
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  BENCH_CUDA(launch());
  BENCH_CUDA(cudaDeviceSynchronize());
  double seconds = 0;
  for (auto _ : state) {
    BENCH_CUDA(cudaEventRecord(start));
    BENCH_CUDA(launch());
    BENCH_CUDA(cudaEventRecord(stop));
    BENCH_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms / 1e3);
    seconds += ms / 1e3;
  }
  const double flops = 4.0 * sh.head_dim * heads * (static_cast<double>(n) * (n + 1) / 2);
  state.counters["TFLOP/s"] = seconds > 0 ? state.iterations() * flops / seconds / 1e12 : 0;
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

void DecodeArgs(benchmark::internal::Benchmark* b) {
  for (int k : {1, 2, 0}) {  // pipelined, grouped, split_v1 (A/B)
    for (int s = 0; s < static_cast<int>(sizeof(kShapes) / sizeof(kShapes[0])); ++s) {
      b->Args({s, 64, 2048, k, 2048});  // the reference point: batch 64 x context 2K
    }
    b->Args({0, 1, 8192, k, 8192});  // one long sequence: split-K matters
    b->Args({0, 256, 512, k, 512});
    b->Args({3, 1, 2048, k, 2048});
    b->Args({0, 8, 1024, k, 8192});  // a graph planned for 8K running 1K contexts
  }
}

void PrefillArgs(benchmark::internal::Benchmark* b) {
  for (int tc : {1, 0}) {
    b->Args({0, 2048, tc});  // Llama-8B shape, a 2K prompt
    b->Args({3, 512, tc});   // the default model's shape
  }
}

BENCHMARK(BM_PagedDecodeAttention)
    ->Apply(DecodeArgs)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PagedPrefillAttention)
    ->Apply(PrefillArgs)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace weft::kernels::cuda

BENCHMARK_MAIN();

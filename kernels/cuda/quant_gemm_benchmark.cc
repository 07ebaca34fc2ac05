// The batched linear layers of the CUDA backend on a GPU (manual, tagged "manual"):
// cuBLAS on the dequantized bf16 copy (what ModelRunner runs by default above 4 rows)
// against the fused dequantize + tensor-core QuantGemm on the quantized GEMV layout
// (quant_gemm.h), for the default model's and Gemma 3 270M's matrices at m = 8 .. 256
// rows — the figure that decides --quant_gemm_max_rows (issue 31, item 6).
//
// BM_Linear/<shape>/<m>/<kernel>: kernel 0: cuBLAS bf16 (kc::Gemm), 1: QuantGemm split
// over the device's SMs (what the backend runs), 2: QuantGemm without split-K. Each
// iteration times kLaunches back-to-back launches with CUDA events (per-launch time is
// reported), rotating over copies of the weights that together exceed the L2 cache, so
// every launch reads its weights from HBM as a decode step's layers do (x and y stay
// cache-resident, as in a step). Counters: "GB/s" — the bytes the kernel must read and
// write (its own weight bytes: bf16 for cuBLAS, the quantized arrays for QuantGemm, plus
// x and y) per second; "roofline%" — that against WEFT_ROOFLINE_GBPS (default 3000: the
// H100's copy bandwidth, as paged_attention_benchmark); "TFLOP/s" (2 m n k); "splits".
// Weights are random blocks of the shape's GGUF type (testing/random_weights.h).
//
// Build and run on a GPU machine (../shared/gpu/README.md; 198 cases, about 1-2 minutes):
//   here:    GPU_EXTRA_TARGETS=//kernels/cuda:quant_gemm_benchmark ../shared/gpu/pack.sh
//   device, from the checkout's root (env.sh unpacks .gpu/pack.tar.xz to /tmp/weft-gpu/x):
//            . .gpu/env.sh && timeout 300 $X/bin/quant_gemm_benchmark
//              --benchmark_min_time=0.1 [--benchmark_filter='^BM_Linear/[0-4]/']
//            (the filter matches the name, not the label: shapes 0-4 are smollm_*, 5-10 gemma_*;
//            tools/gpu/ab.sh runs the smollm rows)
//   or locally with a GPU:  bazel run --config=cuda -c opt //kernels/cuda:quant_gemm_benchmark
// Read it per (shape, m) row triple: the smaller time of cublas_bf16 vs qgemm says which
// path --quant_gemm_max_rows should take at that m (qgemm_nosplit shows what split-K buys).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/ggml_types.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/quant.h"
#include "kernels/cuda/quant_gemm.h"
#include "kernels/cuda/quant_repack.h"
#include "kernels/cuda/testing/bench_util.h"
#include "kernels/cuda/testing/random_weights.h"

namespace weft::kernels::cuda {
namespace {

struct Shape {
  const char* name;
  GgmlType type;
  int64_t n, k;
};

// The linear launches of a step as ModelRunner makes them (fused QKV and gate/up; a
// mixed fused matrix is one launch per type).
const Shape kShapes[] = {
    {"smollm_qkv_q4_1", GgmlType::kQ4_1, 960, 576},
    {"smollm_o_q4_1", GgmlType::kQ4_1, 576, 576},
    {"smollm_gate_up_q4_1", GgmlType::kQ4_1, 3072, 576},
    {"smollm_down_q4_1", GgmlType::kQ4_1, 576, 1536},
    {"smollm_head_q8_0", GgmlType::kQ8_0, 49152, 576},
    {"gemma_qk_q5_0", GgmlType::kQ5_0, 1280, 640},
    {"gemma_v_q8_0", GgmlType::kQ8_0, 256, 640},
    {"gemma_o_q4_k", GgmlType::kQ4_K, 640, 1024},
    {"gemma_gate_up_q5_0", GgmlType::kQ5_0, 4096, 640},
    {"gemma_down_q6_k", GgmlType::kQ6_K, 640, 2048},
    {"gemma_down_q4_k", GgmlType::kQ4_K, 640, 2048},
};
constexpr int kLaunches = 20;
constexpr int64_t kRotateBytes = int64_t{192} << 20;  // > L2 (50 MiB H100, 60 MiB H200)

using testing::Device;
using testing::RooflineGbps;

// `copies` back-to-back copies of `host` in one allocation.
cudaError_t UploadCopies(const void* host, size_t bytes, int copies, Device* out) {
  if (bytes == 0) return cudaSuccess;
  if (cudaError_t e = cudaMalloc(&out->p, bytes * copies); e != cudaSuccess) return e;
  for (int c = 0; c < copies; ++c) {
    if (cudaError_t e = cudaMemcpy(out->as<uint8_t>() + c * bytes, host, bytes,
                                   cudaMemcpyHostToDevice);
        e != cudaSuccess) {
      return e;
    }
  }
  return cudaSuccess;
}

int CopiesFor(int64_t bytes) {
  return static_cast<int>(std::clamp<int64_t>(kRotateBytes / std::max<int64_t>(bytes, 1) + 1,
                                              1, 1024));
}

// One shape's operands on the device: `copies` copies of the weights (the bf16 copy for
// cuBLAS, the GEMV arrays for QuantGemm), x, y and the split-K scratch.
struct Operands {
  RepackedMatrix r;
  int64_t weight_bytes = 0, dense_bytes = 0;
  int copies = 1;
  Device qs, d, mn, dense, x, y, partials;
};

// "" or what failed.
std::string Prepare(const Shape& sh, int32_t m, int kernel, int sms, Operands* o) {
  const WeightType type = static_cast<WeightType>(sh.type);
  const std::vector<uint8_t> bytes = testing::RandomGgufMatrix(sh.type, sh.n, sh.k, 7);
  if (!RepackForGemv(type, bytes.data(), RowBytes(sh.type, sh.k), sh.n, sh.k, &o->r)) {
    return "no GEMV layout for the type";
  }
  const RepackedMatrix& r = o->r;
  o->dense_bytes = sh.n * sh.k * 2;
  o->weight_bytes = kernel == 0 ? o->dense_bytes
                                : static_cast<int64_t>(r.qs.size() + 2 * r.d.size() +
                                                       2 * r.m.size());
  o->copies = CopiesFor(o->weight_bytes);
  cudaError_t e = cudaSuccess;
  const auto fail = [&e](cudaError_t v) { return (e = v) != cudaSuccess; };
  if (kernel == 0) {
    Device raw;
    if (fail(UploadCopies(bytes.data(), bytes.size(), 1, &raw)) ||
        fail(cudaMalloc(&o->dense.p, o->dense_bytes * o->copies))) {
      return cudaGetErrorString(e);
    }
    for (int c = 0; c < o->copies; ++c) {
      if (fail(DequantizeWeights(type, raw.p, RowBytes(sh.type, sh.k), sh.n, sh.k,
                                 o->dense.as<uint8_t>() + c * o->dense_bytes,
                                 WeightDtype::kBf16, nullptr))) {
        return cudaGetErrorString(e);
      }
    }
  } else if (fail(UploadCopies(r.qs.data(), r.qs.size(), o->copies, &o->qs)) ||
             fail(UploadCopies(r.d.data(), 2 * r.d.size(), o->copies, &o->d)) ||
             fail(UploadCopies(r.m.data(), 2 * r.m.size(), o->copies, &o->mn)) ||
             fail(cudaMalloc(&o->partials.p, QuantGemmMaxScratchFloats(sms) * sizeof(float)))) {
    return cudaGetErrorString(e);
  }
  std::mt19937 rng(3);
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::vector<uint16_t> xh(m * sh.k);
  for (uint16_t& v : xh) v = Fp32ToBf16(val(rng));
  if (fail(UploadCopies(xh.data(), xh.size() * 2, 1, &o->x)) ||
      fail(cudaMalloc(&o->y.p, int64_t{m} * sh.n * sizeof(float))) ||
      fail(cudaDeviceSynchronize())) {
    return cudaGetErrorString(e);
  }
  return "";
}

void BM_Linear(benchmark::State& state) {
  const Shape& sh = kShapes[state.range(0)];
  const int32_t m = static_cast<int32_t>(state.range(1));
  const int kernel = static_cast<int>(state.range(2));
  state.SetLabel(std::string(sh.name) +
                 (kernel == 0 ? " cublas_bf16" : kernel == 1 ? " qgemm" : " qgemm_nosplit"));
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    state.SkipWithError("no CUDA device");
    return;
  }
  int sms = 0;
  BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  Operands o;
  if (const std::string error = Prepare(sh, m, kernel, sms, &o); !error.empty()) {
    state.SkipWithError(error.c_str());
    return;
  }
  const RepackedMatrix& r = o.r;
  cublasHandle_t handle = nullptr;
  if (kernel == 0 && cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    state.SkipWithError("cublasCreate failed");
    return;
  }
  const QuantGemmScratch scratch{kernel == 1 ? sms : 0, o.partials.as<float>()};
  // Launch i on weight copy i % copies.
  auto launch = [&](int i) -> cudaError_t {
    const int c = i % o.copies;
    if (kernel == 0) {
      return Gemm(handle, WeightDtype::kBf16, o.x.p, sh.k,
                  o.dense.as<uint8_t>() + c * o.dense_bytes, sh.k, m, sh.n, sh.k, o.y.p,
                  ActDtype::kF32, sh.n, 0.0f) == CUBLAS_STATUS_SUCCESS
                 ? cudaSuccess
                 : cudaErrorUnknown;
    }
    const GemvWeights w{static_cast<WeightType>(sh.type), o.qs.as<uint8_t>() + c * r.qs.size(),
                        r.d.empty() ? nullptr : o.d.as<uint16_t>() + c * r.d.size(),
                        r.m.empty() ? nullptr : o.mn.as<uint16_t>() + c * r.m.size(), sh.n,
                        sh.k};
    return QuantGemm(w, o.x.as<uint16_t>(), sh.k, m, o.y.as<float>(), sh.n, false, scratch,
                     nullptr);
  };
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < o.copies; ++i) BENCH_CUDA(launch(i));  // warm-up (cuBLAS heuristics)
  BENCH_CUDA(cudaDeviceSynchronize());
  double seconds = 0;
  int next = 0;
  for (auto _ : state) {
    BENCH_CUDA(cudaEventRecord(start));
    for (int i = 0; i < kLaunches; ++i) BENCH_CUDA(launch(next++));
    BENCH_CUDA(cudaEventRecord(stop));
    BENCH_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms / 1e3 / kLaunches);
    seconds += ms / 1e3 / kLaunches;
  }
  const int64_t moved = o.weight_bytes + int64_t{m} * sh.k * 2 + int64_t{m} * sh.n * 4;
  const double gbps = seconds > 0 ? state.iterations() * moved / seconds / 1e9 : 0;
  state.counters["GB/s"] = gbps;
  state.counters["roofline%"] = 100.0 * gbps / RooflineGbps();
  state.counters["TFLOP/s"] =
      seconds > 0 ? state.iterations() * 2.0 * m * sh.n * sh.k / seconds / 1e12 : 0;
  state.counters["splits"] =
      kernel == 0 ? 0 : PlanQuantGemm(m, sh.n, sh.k, scratch.num_sms).splits;
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (handle != nullptr) cublasDestroy(handle);
}

void LinearArgs(benchmark::internal::Benchmark* b) {
  for (int s = 0; s < static_cast<int>(sizeof(kShapes) / sizeof(kShapes[0])); ++s) {
    for (int m : {8, 16, 32, 64, 128, 256}) {
      for (int kernel : {0, 1, 2}) b->Args({s, m, kernel});  // A/B/C side by side
    }
  }
}

BENCHMARK(BM_Linear)->Apply(LinearArgs)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace weft::kernels::cuda

BENCHMARK_MAIN();

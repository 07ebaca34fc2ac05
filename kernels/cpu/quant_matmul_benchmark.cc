// Matmul kernels at the default model's shapes: GEMV (m = 1, decode) and GEMM (prefill
// tiles). Reports weight bytes/s and MAC/s per call, single thread.
//   bazel run -c opt //kernels:cpu_quant_matmul_benchmark   (HOT=1: weights in cache)
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/ggml_types.h"
#include "kernels/cpu/bf16_matmul.h"
#include "kernels/cpu/int8_matmul.h"
#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/quant_matmul.h"

namespace weft::kernels {
namespace {

// n rows of k random quantized weights of `type`, every block scale 0.01 (the first
// two bytes of each block are its fp16 scale in all the formats benchmarked).
std::vector<uint8_t> RandomRows(GgmlType type, int64_t n, int64_t k, std::mt19937& rng) {
  std::vector<uint8_t> src(n * RowBytes(type, k));
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  const int64_t block_bytes = RowBytes(type, 32);
  const uint16_t d = Fp32ToFp16(0.01f);
  for (size_t off = 0; off + block_bytes <= src.size(); off += block_bytes) std::memcpy(&src[off], &d, 2);
  return src;
}

// Copies of the packed weights to cycle through so they stream from DRAM (256 MB), or one
// (cache-hot) with HOT set in the environment.
int64_t NumCopies(int64_t bytes) {
  return std::getenv("HOT") ? 1 : std::max<int64_t>(1, (256 << 20) / bytes);
}

void BM_Matmul(benchmark::State& state, MatmulImpl impl, GgmlType type) {
  const int64_t k = state.range(0), n = state.range(1), m = state.range(2);
  if (!MatmulSupported(impl, type, k)) {
    state.SkipWithError("unsupported here");
    return;
  }
  const int64_t row_bytes = RowBytes(type, k);
  const int64_t copies = NumCopies(row_bytes * n);
  std::vector<uint8_t> w(copies * n * row_bytes);
  std::mt19937 rng(1);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  // Keep fp16 scales finite: small positive values in every block header.
  const GgmlTypeTraits* tr = GetGgmlTypeTraits(static_cast<uint32_t>(type));
  if (tr->block_size == 32) {
    for (size_t off = 0; off + tr->type_size <= w.size(); off += tr->type_size) {
      const uint16_t d = Fp32ToFp16(0.01f);
      std::memcpy(&w[off], &d, 2);
    }
  } else {
    for (size_t off = 0; off + 2 <= w.size(); off += 2) {
      const uint16_t h = type == GgmlType::kBF16 ? Fp32ToBf16(0.01f) : Fp32ToFp16(0.01f);
      if (type != GgmlType::kF32) std::memcpy(&w[off], &h, 2);
    }
  }
  std::vector<float> x(m * k, 0.5f), y(m * n);
  int64_t c = 0;
  for (auto _ : state) {
    const QuantMatrix mat{type, w.data() + (c++ % copies) * n * row_bytes, n, k, row_bytes};
    Matmul(impl, mat, x.data(), k, m, y.data(), n, 0, n);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * n * row_bytes);
  state.counters["MAC/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * m * n * k,
                                               benchmark::Counter::kIsRate);
}

void BM_Packed(benchmark::State& state, GgmlType type) {
  const int64_t k = state.range(0), n = state.range(1), m = state.range(2);
  if (!PackedMatmulSupported(type, k)) {
    state.SkipWithError("unsupported here");
    return;
  }
  const int64_t row_bytes = RowBytes(type, k);
  const int64_t bytes = PackedBytes(type, n, k);
  const int64_t copies = NumCopies(bytes);
  std::mt19937 rng(1);
  const std::vector<uint8_t> src = RandomRows(type, n, k, rng);
  std::vector<uint8_t> w(copies * bytes);
  for (int64_t c = 0; c < copies; ++c) {
    PackWeights(QuantMatrix{type, src.data(), n, k, row_bytes}, w.data() + c * bytes);
  }
  std::vector<float> x(m * k, 0.5f), y(m * n);
  int64_t c = 0;
  for (auto _ : state) {
    const PackedMatrix mat{type, w.data() + (c++ % copies) * bytes, n, k};
    PackedMatmul(mat, x.data(), k, m, y.data(), n, 0, n);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["MAC/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * m * n * k,
                                               benchmark::Counter::kIsRate);
}

void BM_Int8(benchmark::State& state, Int8Isa isa, GgmlType type) {
  const int64_t k = state.range(0), n = state.range(1), m = state.range(2);
  if (!Int8IsaSupported(isa) || !Int8MatmulSupported(type, k)) {
    state.SkipWithError("unsupported here");
    return;
  }
  const int64_t row_bytes = RowBytes(type, k);
  const int64_t bytes = Int8PackedBytes(type, n, k);
  const int64_t copies = NumCopies(bytes);
  std::mt19937 rng(1);
  const std::vector<uint8_t> src = RandomRows(type, n, k, rng);
  std::vector<uint8_t> w(copies * bytes);
  for (int64_t c = 0; c < copies; ++c) {
    PackInt8Weights(QuantMatrix{type, src.data(), n, k, row_bytes}, w.data() + c * bytes);
  }
  std::vector<float> x(m * k);
  for (float& f : x) f = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
  std::vector<int8_t> q(m * k);
  std::vector<float> d(m * k / 32), ds(m * k / 32);
  std::vector<int32_t> qs(m * k / 32);
  Q8Rows rows{k, q.data(), d.data(), ds.data(), qs.data()};
  QuantizeRowsQ8(x.data(), k, 0, m, &rows);
  std::vector<float> y(m * n);
  int64_t c = 0;
  for (auto _ : state) {
    const Int8PackedMatrix mat{type, w.data() + (c++ % copies) * bytes, n, k};
    Int8Matmul(isa, mat, rows, m, y.data(), n, 0, n);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["GOPS"] = benchmark::Counter(2e-9 * static_cast<double>(state.iterations()) * m * n * k,
                                              benchmark::Counter::kIsRate);
}

// The integer dot-product ceiling of one core: GOPS (2 x multiply-adds per second of
// thread CPU time) of independent `vpdpbusd` chains / AMX TDPBSUD tiles (K = 32 per tile
// op, as the AMX kernel runs them). Compare BM_Int8's GOPS with these.
void BM_Int8Peak(benchmark::State& state, Int8Isa isa) {
  if (Int8PeakLoop(isa, 1) == 0) {
    state.SkipWithError("unsupported here");
    return;
  }
  int64_t macs = 0;
  for (auto _ : state) macs += Int8PeakLoop(isa, 100000);
  state.counters["GOPS"] = benchmark::Counter(2e-9 * static_cast<double>(macs), benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(BM_Int8Peak, vpdpbusd, Int8Isa::kAvx512Vnni);
BENCHMARK_CAPTURE(BM_Int8Peak, amx_k32, Int8Isa::kAmx);

// The AMX bf16 tile ceiling (GFLOPS: 2 x multiply-adds per second of thread CPU time).
void BM_Bf16Peak(benchmark::State& state) {
  if (Bf16PeakLoop(1) == 0) {
    state.SkipWithError("unsupported here");
    return;
  }
  int64_t macs = 0;
  for (auto _ : state) macs += Bf16PeakLoop(100000);
  state.counters["GOPS"] = benchmark::Counter(2e-9 * static_cast<double>(macs), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Bf16Peak);

// Bf16 matmul on AMX (bf16_matmul.h) on the int8 kernels' packed weights.
void BM_Bf16Amx(benchmark::State& state, GgmlType type) {
  const int64_t k = state.range(0), n = state.range(1), m = state.range(2);
  if (!Bf16MatmulSupported() || !Bf16PackSupported(type, k)) {
    state.SkipWithError("unsupported here");
    return;
  }
  const int64_t row_bytes = RowBytes(type, k);
  const int64_t bytes = Bf16PackedBytes(type, n, k);
  const int64_t copies = NumCopies(bytes);
  std::mt19937 rng(1);
  const std::vector<uint8_t> src = RandomRows(type, n, k, rng);
  std::vector<uint8_t> w(copies * bytes);
  for (int64_t c = 0; c < copies; ++c) {
    PackBf16Weights(QuantMatrix{type, src.data(), n, k, row_bytes}, w.data() + c * bytes);
  }
  std::vector<float> x(m * k);
  for (float& f : x) f = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
  std::vector<uint16_t> xb(Bf16RowsElements(m, k));
  Bf16Rows rows{k, xb.data()};
  ConvertRowsBf16(x.data(), k, 0, m, &rows);
  std::vector<float> y(m * n);
  int64_t c = 0;
  for (auto _ : state) {
    const Bf16PackedMatrix mat{type, w.data() + (c++ % copies) * bytes, n, k};
    Bf16Matmul(mat, rows, m, y.data(), n, 0, n);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["GOPS"] = benchmark::Counter(2e-9 * static_cast<double>(state.iterations()) * m * n * k,
                                              benchmark::Counter::kIsRate);
}

void BM_Quantize(benchmark::State& state) {
  const int64_t k = state.range(0), m = state.range(1);
  std::vector<float> x(m * k, 0.25f);
  std::vector<int8_t> q(m * k);
  std::vector<float> d(m * k / 32), ds(m * k / 32);
  std::vector<int32_t> qs(m * k / 32);
  Q8Rows rows{k, q.data(), d.data(), ds.data(), qs.data()};
  for (auto _ : state) {
    QuantizeRowsQ8(x.data(), k, 0, m, &rows);
    benchmark::DoNotOptimize(q.data());
  }
  state.SetBytesProcessed(state.iterations() * m * k * 4);
}
BENCHMARK(BM_Quantize)->Args({576, 64})->Args({1536, 64});

void Int8Shapes(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 4, 16, 64, 128, 256, 512}) {
    b->Args({576, 1536, m});   // ffn gate/up
    b->Args({1536, 576, m});   // ffn down
  }
  b->Args({576, 49152, 1});    // LM head
  b->Args({576, 49152, 64});
}

BENCHMARK_CAPTURE(BM_Int8, vnni_q4_1, Int8Isa::kAvx512Vnni, GgmlType::kQ4_1)->Apply(Int8Shapes);
BENCHMARK_CAPTURE(BM_Int8, amx_q4_1, Int8Isa::kAmx, GgmlType::kQ4_1)->Apply(Int8Shapes);
BENCHMARK_CAPTURE(BM_Bf16Amx, amx_bf16_q4_1, GgmlType::kQ4_1)->Apply(Int8Shapes);
BENCHMARK_CAPTURE(BM_Bf16Amx, amx_bf16_q8_0, GgmlType::kQ8_0)->Args({576, 49152, 1})->Args({576, 49152, 64});
BENCHMARK_CAPTURE(BM_Int8, amx_q8_0, Int8Isa::kAmx, GgmlType::kQ8_0)->Args({576, 49152, 16})->Args({576, 49152, 64});
BENCHMARK_CAPTURE(BM_Int8, vnni_q8_0, Int8Isa::kAvx512Vnni, GgmlType::kQ8_0)->Args({576, 49152, 1})->Args({576, 49152, 64});
BENCHMARK_CAPTURE(BM_Int8, avx2_q4_1, Int8Isa::kAvx2, GgmlType::kQ4_1)->Args({576, 1536, 1})->Args({576, 1536, 64});

void Shapes(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 8, 64}) {
    b->Args({576, 1536, m});   // ffn gate/up
    b->Args({1536, 576, m});   // ffn down
  }
  b->Args({576, 49152, 1});    // LM head
}

BENCHMARK_CAPTURE(BM_Matmul, avx512_q4_1, MatmulImpl::kAvx512, GgmlType::kQ4_1)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_Matmul, avx512_q8_0, MatmulImpl::kAvx512, GgmlType::kQ8_0)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_Packed, packed_q4_1, GgmlType::kQ4_1)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_Packed, packed_q8_0, GgmlType::kQ8_0)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_Matmul, reference_q4_1, MatmulImpl::kReference, GgmlType::kQ4_1)
    ->Args({576, 1536, 1})
    ->Args({576, 1536, 8});

}  // namespace
}  // namespace weft::kernels

BENCHMARK_MAIN();

// Helpers of the CUDA backend's GPU tests (cuda_backend_test.cc, cuda_backend_graph_test.cc):
// a CPU reference backend beside a CUDA one on the same tiny model, logits compared to the
// bf16 tolerance, sequences and chunks, the host Sampler's result for a step's entry.
#ifndef WEFT_WORKER_BACKENDS_CUDA_CUDA_BACKEND_TEST_UTIL_H_
#define WEFT_WORKER_BACKENDS_CUDA_CUDA_BACKEND_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "common/gguf.h"
#include "common/sampling/sampler.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_status.h"
#include "worker/backends/cpu_backend.h"
#include "worker/backends/cuda/cuda_backend.h"
#include "worker/backends/testing/step_driver.h"
#include "worker/model/testing/tiny_llama.h"

namespace weft {
namespace cuda_test {

namespace kc = ::weft::kernels::cuda;

#define SKIP_WITHOUT_CUDA()                                                       \
  do {                                                                            \
    if (kc::CudaDeviceCount() == 0) {                                             \
      GTEST_SKIP() << "no CUDA device (" << kc::CudaNoDeviceReason() << ")";      \
    }                                                                             \
  } while (0)

struct Pair {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<CpuBackend> cpu;
  std::unique_ptr<CudaBackend> gpu;
};

inline std::unique_ptr<Pair> MakePair(const testing::TinyLlamaSpec& spec, CudaBackendOptions o) {
  auto p = std::make_unique<Pair>();
  p->bytes = testing::BuildTinyLlama(spec);
  auto file = GgufFile::FromBuffer(p->bytes.data(), p->bytes.size());
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return nullptr;
  p->file = std::move(*file);
  CpuBackendOptions co;
  co.model.kernels = KernelChoice::kReference;
  co.model.kv_dtype = KvDtype::kF32;  // the exact reference
  co.model.num_threads = 2;
  co.num_kv_blocks = 64;
  auto cpu = CpuBackend::Create(*p->file, co);
  EXPECT_TRUE(cpu.ok()) << cpu.status();
  o.num_kv_blocks = 64;
  auto gpu = CudaBackend::Create(*p->file, o);
  EXPECT_TRUE(gpu.ok()) << gpu.status();
  if (!cpu.ok() || !gpu.ok()) return nullptr;
  p->cpu = std::move(*cpu);
  p->gpu = std::move(*gpu);
  return p;
}

// |a - b| <= tol * max|b| over the row: logits agree to the bf16 path's precision.
inline void ExpectClose(const ForwardOutput& gpu, const ForwardOutput& cpu, double tol) {
  ASSERT_EQ(gpu.num_rows, cpu.num_rows);
  ASSERT_EQ(gpu.vocab_size, cpu.vocab_size);
  for (int32_t r = 0; r < cpu.num_rows; ++r) {
    EXPECT_EQ(gpu.row_sequence[r], cpu.row_sequence[r]);
    double scale = 1e-3, worst = 0;
    for (int32_t v = 0; v < cpu.vocab_size; ++v) {
      scale = std::max(scale, double{std::fabs(cpu.Row(r)[v])});
    }
    for (int32_t v = 0; v < cpu.vocab_size; ++v) {
      ASSERT_FALSE(std::isnan(gpu.Row(r)[v])) << "row " << r << " token " << v;
      worst = std::max(worst, double{std::fabs(gpu.Row(r)[v] - cpu.Row(r)[v])});
    }
    EXPECT_LE(worst, tol * scale) << "row " << r;
  }
}

// Runs `batch` on both backends and compares.
inline void Step(Pair* p, const ForwardBatch& batch, double tol = 0.03) {
  ForwardOutput a, b;
  const absl::Status sg = p->gpu->Forward(batch, &a);
  const absl::Status sc = p->cpu->Forward(batch, &b);
  ASSERT_TRUE(sg.ok()) << sg;
  ASSERT_TRUE(sc.ok()) << sc;
  ExpectClose(a, b, tol);
}

struct Seq {
  std::vector<int32_t> tokens;
  std::vector<int32_t> table;
};

inline SequenceChunk Chunk(const Seq& s, int32_t start, int32_t n, bool logits) {
  return {absl::MakeConstSpan(s.tokens).subspan(start, n), start, absl::MakeConstSpan(s.table),
          logits};
}

// `len` pseudo-random tokens; the caller sets the block table.
inline Seq MakeSeq(int32_t len, int32_t vocab, uint32_t seed) {
  Seq s;
  for (int32_t i = 0; i < len; ++i) {
    s.tokens.push_back(static_cast<int32_t>((seed * 131 + i * 17) % vocab));
  }
  return s;
}


inline int64_t SeqId(int64_t request, int32_t sample = 0) {
  return request * SequenceRef::kMaxSamplesPerRequest + sample;
}

// The host Sampler's result for batch entry `entry` (its k-th sampled row) of the
// driver's last applied batch, on `logits` (Forward of the same chunks).
inline SampleResult HostSample(const testing::StepDriver& d, const ForwardOutput& logits,
                        size_t entry, int32_t row) {
  const ScheduledSequence& sc = d.batch().sequences[entry];
  const WorkerSequence& seq = *sc.state;
  const auto t = absl::MakeConstSpan(seq.tokens);
  SampleResult want;
  Sampler host(logits.vocab_size);
  const absl::Status s =
      host.Sample({seq.sampling, seq.sample_index}, absl::MakeConstSpan(logits.Row(row), logits.vocab_size),
                  t.subspan(0, seq.num_prompt_tokens), t.subspan(seq.num_prompt_tokens), &want,
                  sc.allowed_tokens);
  EXPECT_TRUE(s.ok()) << s;
  return want;
}


}  // namespace cuda_test
}  // namespace weft

#endif  // WEFT_WORKER_BACKENDS_CUDA_CUDA_BACKEND_TEST_UTIL_H_

// weft_forward_bench: single-sequence decode and prefill throughput of LlamaModel.
//
//   bazel run -c opt //worker:weft_forward_bench --
//       --model=$WEFT_MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf --threads=2
//   (one command line)
//
// Decode: prefills --context tokens (untimed), then runs --decode_tokens steps of one
// token each (greedy, the argmax fed back) and reports tokens/s. Prefill: one forward
// pass over a --prefill_tokens prompt into an empty cache. Each measurement is repeated
// --repeats times; the median and the best are printed. Results go to stdout, logs to
// stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "common/flags.h"
#include "common/gguf.h"
#include "common/kv_dtype.h"
#include "kernels/cpu/cpu_features.h"
#include "worker/kv_cache.h"
#include "worker/model/llama_model.h"
#include "common/sampling/sampler.h"
#include "worker/thread_pool.h"

ABSL_FLAG(std::string, model, "", "GGUF file (default: $WEFT_MODEL_DIR or models/, SmolLM2)");
ABSL_FLAG(int32_t, threads, 2, "threads of the forward pass");
ABSL_FLAG(std::string, kernels, "auto", "auto, amx, avx512vnni, avx2, reference, avx512 or packed");
ABSL_FLAG(std::string, kv_dtype, weft::KvDtypeName(weft::kDefaultKvDtype),
          weft::kKvDtypeFlagHelp);
ABSL_FLAG(int32_t, context, 128, "tokens in the cache before the timed decode steps");
ABSL_FLAG(int32_t, decode_tokens, 64, "timed decode steps");
ABSL_FLAG(int32_t, prefill_tokens, 512, "prompt length of the prefill measurement");
ABSL_FLAG(int32_t, repeats, 5, "repetitions of each measurement");
ABSL_FLAG(int32_t, decode_batch, 0,
          "also time batched decode: this many sequences of --context tokens, one token each "
          "per step (0: skip)");
ABSL_FLAG(bool, bandwidth, true,
          "also measure the memory read bandwidth (threads of the pool, 512 MB) and the decode "
          "ceiling it implies (weight bytes per step / bandwidth)");
ABSL_FLAG(bool, matmul_chain, true,
          "also time the decode step's matmuls alone (every weight once, m = 1, on the same "
          "threads): the weight-streaming part of a decode step");

namespace weft {
namespace {

using Clock = std::chrono::steady_clock;

std::string DefaultModel() {
  const char* dir = std::getenv("WEFT_MODEL_DIR");
  return std::string(dir != nullptr && *dir ? dir : "models") +
         "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::string CpuName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

std::vector<int32_t> Prompt(int32_t n) {
  std::mt19937 rng(1);
  std::vector<int32_t> v(n);
  for (int32_t& t : v) t = 300 + static_cast<int32_t>(rng() % 39700);
  return v;
}

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    std::exit(1);
  }
}

// Seconds of one decode run: context tokens prefilled, then `steps` single-token steps.
double DecodeRun(LlamaModel* m, KvCache* cache, int32_t context, int32_t steps) {
  std::vector<int32_t> tokens = Prompt(context);
  std::vector<int32_t> table((context + steps + 15) / 16);
  std::iota(table.begin(), table.end(), 0);
  ForwardOutput out;
  ForwardBatch batch;
  batch.sequences.push_back({tokens, 0, table, true});
  Check(m->Forward(batch, cache, &out));
  Sampler sampler(m->config().vocab_size);
  SamplerParams greedy;
  greedy.temperature = 0;
  SampleResult r;
  const auto start = Clock::now();
  for (int32_t i = 0; i < steps; ++i) {
    Check(sampler.Sample(greedy, absl::MakeConstSpan(out.Row(0), out.vocab_size), {}, {}, &r));
    tokens.push_back(r.token);
    batch.sequences[0] = {absl::MakeConstSpan(tokens).subspan(context + i, 1), context + i,
                          table, true};
    Check(m->Forward(batch, cache, &out));
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// `batch` sequences prefilled to `context` tokens once (untimed); Run() then times
// `steps` decode steps of all of them (positions context .. context+steps-1, rewritten by
// every run).
class BatchedDecode {
 public:
  BatchedDecode(LlamaModel* m, KvCache* cache, int32_t batch, int32_t context, int32_t steps)
      : m_(m), cache_(cache), context_(context), steps_(steps), tokens_(batch), tables_(batch) {
    const int32_t per_seq = (context + steps + 15) / 16;
    ForwardOutput out;
    for (int32_t s = 0; s < batch; ++s) {
      tokens_[s] = Prompt(context + steps);
      std::rotate(tokens_[s].begin(), tokens_[s].begin() + s % (context + steps), tokens_[s].end());
      for (int32_t b = 0; b < per_seq; ++b) tables_[s].push_back(s * per_seq + b);
      ForwardBatch pre;
      pre.sequences.push_back(
          {absl::MakeConstSpan(tokens_[s]).subspan(0, context), 0, tables_[s], false});
      Check(m->Forward(pre, cache, &out));
    }
  }

  double Run() {
    ForwardOutput out;
    const auto start = Clock::now();
    for (int32_t i = 0; i < steps_; ++i) {
      ForwardBatch step;
      for (size_t s = 0; s < tokens_.size(); ++s) {
        step.sequences.push_back({absl::MakeConstSpan(tokens_[s]).subspan(context_ + i, 1),
                                  context_ + i, tables_[s], true});
      }
      Check(m_->Forward(step, cache_, &out));
    }
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

 private:
  LlamaModel* m_;
  KvCache* cache_;
  const int32_t context_, steps_;
  std::vector<std::vector<int32_t>> tokens_, tables_;
};

// GB/s of reading a 512 MB buffer with every thread of the pool (the decode roofline).
double ReadBandwidth(ThreadPool* pool) {
  const size_t n = size_t{512} << 20;
  std::vector<uint64_t> buf(n / 8, 1);
  std::vector<uint64_t> sums(pool->num_threads());
  double best = 0;
  for (int r = 0; r < 5; ++r) {
    const auto start = Clock::now();
    pool->ParallelFor(static_cast<int64_t>(buf.size()), 4096, [&](int64_t b, int64_t e) {
      uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
      for (int64_t i = b; i + 4 <= e; i += 4) {
        a0 += buf[i];
        a1 += buf[i + 1];
        a2 += buf[i + 2];
        a3 += buf[i + 3];
      }
      sums[b * pool->num_threads() / buf.size()] = a0 + a1 + a2 + a3;
    });
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::max(best, n / s / 1e9);
  }
  return best;
}

double PrefillRun(LlamaModel* m, KvCache* cache, int32_t n) {
  const std::vector<int32_t> tokens = Prompt(n);
  std::vector<int32_t> table((n + 15) / 16);
  std::iota(table.begin(), table.end(), 0);
  ForwardOutput out;
  ForwardBatch batch;
  batch.sequences.push_back({tokens, 0, table, true});
  const auto start = Clock::now();
  Check(m->Forward(batch, cache, &out));
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Seconds per decode step's worth of matmuls: every Linear of the model with m = 1,
// columns split over the pool as the model does; also returns the weight bytes read.
double MatmulChainRun(const LlamaModel& m, ThreadPool* pool, int steps, double* bytes) {
  std::vector<const Linear*> all;
  for (const LlamaLayerWeights& l : m.weights().layers()) {
    for (const Linear* lin : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      all.push_back(lin);
    }
  }
  all.push_back(&m.weights().lm_head());
  *bytes = 0;
  for (const Linear* lin : all) {
    *bytes += static_cast<double>(RowBytes(lin->type(), lin->in_features())) *
              static_cast<double>(lin->out_features());
  }
  std::vector<float> x(16384, 0.01f), y(1 << 17);
  ActivationBuffer q8;
  const auto start = Clock::now();
  for (int s = 0; s < steps; ++s) {
    for (const Linear* lin : all) {
      q8.Resize(lin->input_forms(), 1, lin->in_features());
      q8.Convert(x.data(), lin->in_features(), 0, 1);
      pool->RunOnAll([&](int t) {
        int64_t b, e;
        ThreadPool::StaticRange(lin->out_features(), 16, pool->num_threads(), t, &b, &e);
        lin->Compute(q8.Input(x.data(), lin->in_features()), 1, y.data(), lin->out_features(), b,
                     e);
      });
    }
  }
  return std::chrono::duration<double>(Clock::now() - start).count() / steps;
}

void Report(const char* what, std::vector<double> rates) {
  std::sort(rates.begin(), rates.end());
  std::printf("%-14s median %8.1f tok/s   best %8.1f tok/s   (%zu runs)\n", what,
              rates[rates.size() / 2], rates.back(), rates.size());
}

int Main() {
  std::string path = absl::GetFlag(FLAGS_model);
  if (path.empty()) path = DefaultModel();
  auto file = GgufFile::Open(path);
  Check(file.status());
  LlamaModelOptions options;
  options.num_threads = absl::GetFlag(FLAGS_threads);
  auto kernels = ParseKernelChoice(absl::GetFlag(FLAGS_kernels));
  Check(kernels.status());
  options.kernels = *kernels;
  auto kv_dtype = ParseKvDtype(absl::GetFlag(FLAGS_kv_dtype));
  Check(kv_dtype.status());
  options.kv_dtype = *kv_dtype;
  auto model = LlamaModel::Create(**file, options);
  Check(model.status());
  LlamaModel* m = model->get();
  const int32_t context = absl::GetFlag(FLAGS_context);
  const int32_t steps = absl::GetFlag(FLAGS_decode_tokens);
  const int32_t prefill = absl::GetFlag(FLAGS_prefill_tokens);
  const int32_t blocks = (std::max(context + steps, prefill) + 15) / 16;
  auto cache = KvCache::Create(m->KvOptions(16, blocks));
  Check(cache.status());
  auto attn = m->AttentionImplFor(16);
  Check(attn.status());
  std::printf(
      "cpu: %s (%s)\nmodel: %s\n%s\nthreads %d, kernels %s (layer matmuls %s, lm head %s, "
      "attention %s), kv %s\n",
      CpuName().c_str(), kernels::CpuFeatures::Get().ToString().c_str(), path.c_str(),
      m->config().DebugString().c_str(), options.num_threads,
      KernelChoiceName(options.kernels), m->weights().layers()[0].wq.kernel_name(),
      m->weights().lm_head().kernel_name(), kernels::AttentionImplName(*attn),
      KvDtypeName(options.kv_dtype));
  DecodeRun(m, cache->get(), context, 4);  // warm-up: page in weights
  std::vector<double> decode, prefill_rates;
  for (int32_t r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    decode.push_back(steps / DecodeRun(m, cache->get(), context, steps));
    prefill_rates.push_back(prefill / PrefillRun(m, cache->get(), prefill));
  }
  const int32_t decode_batch = absl::GetFlag(FLAGS_decode_batch);
  std::vector<double> batched;
  if (decode_batch > 0) {
    auto big = KvCache::Create(m->KvOptions(16, decode_batch * ((context + steps + 15) / 16)));
    Check(big.status());
    BatchedDecode run(m, big->get(), decode_batch, context, steps);
    run.Run();  // warm-up
    for (int32_t r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
      batched.push_back(decode_batch * steps / run.Run());
    }
  }
  double weight_bytes = 0;
  if (absl::GetFlag(FLAGS_matmul_chain)) {
    ThreadPool pool(options.num_threads);
    double bytes = 0;
    std::vector<double> ms;
    for (int32_t r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
      ms.push_back(1e3 * MatmulChainRun(*m, &pool, 20, &bytes));
    }
    std::sort(ms.begin(), ms.end());
    std::printf("matmuls of one decode step: median %.2f ms (%.0f MB of weights, %.1f GB/s), "
                "best %.2f ms\n", ms[ms.size() / 2], bytes / 1e6,
                bytes / 1e6 / ms[ms.size() / 2], ms.front());
    weight_bytes = bytes;
  }
  if (absl::GetFlag(FLAGS_bandwidth)) {
    ThreadPool pool(options.num_threads);
    const double gbs = ReadBandwidth(&pool);
    std::printf("memory read bandwidth: %.1f GB/s (%d threads, 512 MB, best of 5)", gbs,
                options.num_threads);
    if (weight_bytes > 0) {
      std::printf(" -> single-stream decode ceiling %.1f tok/s (%.0f MB of weights per step)",
                  gbs * 1e9 / weight_bytes, weight_bytes / 1e6);
    }
    std::printf("\n");
  }
  char label[64];
  std::snprintf(label, sizeof(label), "decode@%d", context);
  Report(label, decode);
  std::snprintf(label, sizeof(label), "prefill%d", prefill);
  Report(label, prefill_rates);
  if (!batched.empty()) {
    std::snprintf(label, sizeof(label), "decode x%d@%d", decode_batch, context);
    Report(label, batched);
  }
  return 0;
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  weft::ParseFlags(argc, argv,
                   "weft_forward_bench [--model=FILE.gguf --threads --decode_batch ...]");
  return weft::Main();
}

// weft-generate: single-process generation over the same model runtime the workers use
// (no scheduler, no gRPC) — for users checking a model file, and for tests.
//
//   weft-generate --model=models/X.gguf --prompt="The capital of France is"
//                 [--max_tokens=64 --temperature=0 --seed=1 --top_k --top_p --min_p
//                  --ignore_eos --print_token_ids --threads=2 --kernels=auto]
// --prompt is tokenized as llama.cpp does: BOS only if the file asks for it, special
// tokens written in the text ("<|im_start|>") parsed as those tokens.
// Stdout: the generated text (streamed), or one token id per line with --print_token_ids.
// Stderr: the prompt's token count, tokens/s, peak RSS.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "common/flags.h"
#include "common/detokenizer.h"
#include "common/gguf.h"
#include "common/kv_dtype.h"
#include "common/tokenizer.h"
#include "worker/kv_cache.h"
#include "worker/model/llama_model.h"
#include "common/sampling/sampler.h"

ABSL_FLAG(std::string, model, "models/SmolLM2-135M-Instruct.Q4_1.gguf", "GGUF model file");
ABSL_FLAG(std::string, prompt, "", "prompt text (required)");
ABSL_FLAG(int32_t, max_tokens, 64, "tokens to generate (>= 1)");
ABSL_FLAG(double, temperature, 0.0, "0 = greedy");
ABSL_FLAG(uint64_t, seed, 0, "RNG seed (Philox; same seed, same tokens)");
ABSL_FLAG(int32_t, top_k, 0, "0 = off");
ABSL_FLAG(double, top_p, 1.0, "1 = off");
ABSL_FLAG(double, min_p, 0.0, "0 = off");
ABSL_FLAG(bool, ignore_eos, false, "keep going past end-of-generation tokens");
ABSL_FLAG(bool, print_token_ids, false, "print one generated token id per line");
ABSL_FLAG(int32_t, threads, 2, "compute threads");
ABSL_FLAG(std::string, kernels, "auto", "CPU kernels: auto | avx512vnni | avx2 | reference | avx512 | packed");
ABSL_FLAG(std::string, kv_dtype, weft::KvDtypeName(weft::kDefaultKvDtype),
          weft::kKvDtypeFlagHelp);
ABSL_FLAG(int32_t, block_size, 16, "KV block size");

namespace weft {
namespace {

int Fail(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "weft-generate: %s: %s\n", what.c_str(), std::string(s.message()).c_str());
  return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

int Main() {
  const std::string prompt = absl::GetFlag(FLAGS_prompt);
  const int32_t max_tokens = absl::GetFlag(FLAGS_max_tokens);
  if (prompt.empty()) return Fail("flags", absl::InvalidArgumentError("--prompt is required"));
  if (max_tokens < 1) return Fail("flags", absl::InvalidArgumentError("--max_tokens must be >= 1"));
  auto kernels = ParseKernelChoice(absl::GetFlag(FLAGS_kernels));
  if (!kernels.ok()) return Fail("flags", kernels.status());
  SamplerParams sp;
  sp.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  sp.top_k = absl::GetFlag(FLAGS_top_k);
  sp.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  sp.min_p = static_cast<float>(absl::GetFlag(FLAGS_min_p));
  sp.seed = absl::GetFlag(FLAGS_seed);
  if (absl::Status s = sp.Validate(); !s.ok()) return Fail("flags", s);

  auto file = GgufFile::Open(absl::GetFlag(FLAGS_model));
  if (!file.ok()) return Fail("cannot load the model", file.status());
  auto tokenizer = Tokenizer::FromGguf(**file);
  if (!tokenizer.ok()) return Fail("cannot load the tokenizer", tokenizer.status());
  LlamaModelOptions mo;
  mo.num_threads = absl::GetFlag(FLAGS_threads);
  mo.kernels = *kernels;
  auto kv_dtype = ParseKvDtype(absl::GetFlag(FLAGS_kv_dtype));
  if (!kv_dtype.ok()) return Fail("flags", kv_dtype.status());
  mo.kv_dtype = *kv_dtype;
  auto model = LlamaModel::Create(**file, mo);
  if (!model.ok()) return Fail("cannot load the model", model.status());
  LlamaModel& m = **model;

  std::vector<int32_t> tokens = (*tokenizer)->Encode(prompt);
  const int32_t num_prompt = static_cast<int32_t>(tokens.size());
  if (num_prompt == 0) return Fail("prompt", absl::InvalidArgumentError("the prompt has no tokens"));
  const int32_t total = std::min(num_prompt + max_tokens, m.config().context_length);
  if (total <= num_prompt) {
    return Fail("prompt", absl::InvalidArgumentError("the prompt fills the model's context"));
  }
  const int32_t bs = absl::GetFlag(FLAGS_block_size);
  auto cache = KvCache::Create(m.KvOptions(bs, (total + bs - 1) / bs));
  if (!cache.ok()) return Fail("KV cache", cache.status());
  std::vector<int32_t> table((total + bs - 1) / bs);
  std::iota(table.begin(), table.end(), 0);

  Sampler sampler(m.config().vocab_size);
  IncrementalDetokenizer detok(tokenizer->get());
  const bool ids = absl::GetFlag(FLAGS_print_token_ids);
  const bool ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  ForwardBatch batch;
  ForwardOutput out;
  SampleResult r;
  int32_t pos = 0;
  const auto start = std::chrono::steady_clock::now();
  double first_token_s = 0;
  int32_t generated = 0;
  while (static_cast<int32_t>(tokens.size()) < total) {
    batch.sequences.clear();
    batch.sequences.push_back(
        {absl::MakeConstSpan(tokens).subspan(pos), pos, table, /*want_logits=*/true});
    if (absl::Status s = m.Forward(batch, cache->get(), &out); !s.ok()) return Fail("forward", s);
    pos = static_cast<int32_t>(tokens.size());
    const auto prompt_span = absl::MakeConstSpan(tokens).subspan(0, num_prompt);
    const auto out_span = absl::MakeConstSpan(tokens).subspan(num_prompt);
    if (absl::Status s = sampler.Sample(sp, absl::MakeConstSpan(out.Row(0), out.vocab_size),
                                        prompt_span, out_span, &r);
        !s.ok()) {
      return Fail("sampling", s);
    }
    if (generated == 0) {
      first_token_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    ++generated;
    tokens.push_back(r.token);
    const bool eog = (*tokenizer)->IsEog(r.token);
    if (ids) {
      std::printf("%d\n", r.token);
    } else if (!eog) {
      std::string piece = detok.Push(r.token);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
    }
    std::fflush(stdout);
    if (eog && !ignore_eos) break;
  }
  if (!ids) {
    const std::string tail = detok.Flush();
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::printf("\n");
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  std::fprintf(stderr,
               "weft-generate: prompt %d tokens (%.1f ms to first token), %d generated, "
               "%.1f tok/s decode, peak RSS %ld MiB\n",
               num_prompt, first_token_s * 1e3, generated,
               generated > 1 ? (generated - 1) / (secs - first_token_s) : 0.0, ru.ru_maxrss / 1024);
  return 0;
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  weft::ParseFlags(argc, argv, "weft-generate --model=FILE.gguf --prompt=TEXT [...]");
  return weft::Main();
}

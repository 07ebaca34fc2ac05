// Tokenizer throughput on the default model's vocabulary (the scheduler tokenizes
// every prompt on its planning path). Needs the model: $WEFT_MODEL_DIR or models/.
// $WEFT_TOKENIZER_BENCH_MODEL names another GGUF there (or a path), e.g.
// gemma-3-270m-q4_k_m.gguf for a 262k-token SentencePiece vocabulary.
//
//   WEFT_MODEL_DIR=/path/to/models bazel run -c opt //common:tokenizer_benchmark
//
// Reports tokens/s ("items_per_second") and bytes/s for ~4 KB of English prose, a
// ChatML prompt, mixed scripts, and decoding.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "absl/strings/str_cat.h"
#include "common/detokenizer.h"
#include "common/gguf.h"
#include "common/testing/model_path.h"
#include "common/tokenizer.h"

namespace weft {
namespace {

constexpr char kEnglish[] =
    "It is a truth universally acknowledged, that a single man in possession of a good "
    "fortune, must be in want of a wife. However little known the feelings or views of "
    "such a man may be on his first entering a neighbourhood, this truth is so well fixed "
    "in the minds of the surrounding families, that he is considered the rightful property "
    "of some one or other of their daughters. The scheduler admits requests in order of "
    "priority, then arrival; each iteration it fills a token budget with the next token of "
    "every running request and then with chunks of waiting prompts. When the key-value "
    "cache runs out of blocks, the request that arrived last is preempted and recomputed "
    "later; its blocks return to the free list at once. Don't worry: it's simpler than it "
    "sounds, and we'll measure it in 2024 with 1,000 requests of 512 tokens each.\n\n";

struct Fixture {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};

const Fixture* GetFixture() {
  static const Fixture* f = [] {
    auto* fx = new Fixture();
    const char* name = std::getenv("WEFT_TOKENIZER_BENCH_MODEL");
    std::string path;
    if (name != nullptr && *name == '/') {
      path = name;
    } else {
      path = name != nullptr && *name != '\0' ? testing::FindModelFile(name)
                                               : testing::FindModelFile();
    }
    if (path.empty()) return fx;
    auto file = GgufFile::Open(path);
    if (!file.ok()) return fx;
    auto tok = Tokenizer::FromGguf(**file);
    if (!tok.ok()) return fx;
    fx->file = std::move(*file);
    fx->tok = std::move(*tok);
    return fx;
  }();
  return f;
}

std::string EnglishText() {
  std::string s;
  while (s.size() < 4000) s += kEnglish;
  return s;
}

void RunEncode(benchmark::State& state, const std::string& text) {
  const Fixture* f = GetFixture();
  if (f->tok == nullptr) {
    state.SkipWithError("default model not found (set WEFT_MODEL_DIR)");
    return;
  }
  size_t tokens = 0;
  for (auto _ : state) {
    std::vector<int32_t> ids = f->tok->Encode(text);
    tokens += ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(tokens));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens_per_call"] =
      static_cast<double>(tokens) / static_cast<double>(state.iterations());
}

void BM_EncodeEnglish4KB(benchmark::State& state) { RunEncode(state, EnglishText()); }
BENCHMARK(BM_EncodeEnglish4KB);

void BM_EncodeChatPrompt(benchmark::State& state) {
  const std::string prompt = absl::StrCat(
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
      "Face<|im_end|>\n<|im_start|>user\n",
      kEnglish, "<|im_end|>\n<|im_start|>assistant\n");
  RunEncode(state, prompt);
}
BENCHMARK(BM_EncodeChatPrompt);

void BM_EncodeMixedScripts(benchmark::State& state) {
  std::string text;
  while (text.size() < 4000) {
    text +=
        "Hello \xD0\xBC\xD0\xB8\xD1\x80 \xE4\xB8\x96\xE7\x95\x8C "
        "\xD8\xB9\xD8\xA7\xD9\x84\xD9\x85 caf\xC3\xA9 \xF0\x9F\x98\x80 x = 42; ";
  }
  RunEncode(state, text);
}
BENCHMARK(BM_EncodeMixedScripts);

void BM_IncrementalDetokenize(benchmark::State& state) {
  const Fixture* f = GetFixture();
  if (f->tok == nullptr) {
    state.SkipWithError("default model not found (set WEFT_MODEL_DIR)");
    return;
  }
  const std::vector<int32_t> ids = f->tok->Encode(EnglishText());
  for (auto _ : state) {
    IncrementalDetokenizer detok(f->tok.get());
    std::string out;
    for (int32_t id : ids) detok.Push(id, &out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * ids.size()));
}
BENCHMARK(BM_IncrementalDetokenize);

void BM_LoadFromGguf(benchmark::State& state) {
  const Fixture* f = GetFixture();
  if (f->file == nullptr) {
    state.SkipWithError("default model not found (set WEFT_MODEL_DIR)");
    return;
  }
  for (auto _ : state) {
    auto tok = Tokenizer::FromGguf(*f->file);
    benchmark::DoNotOptimize(tok.ok());
  }
}
BENCHMARK(BM_LoadFromGguf)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace weft

BENCHMARK_MAIN();

// Structured output's scheduler-side cost with the real vocabulary (a benchmark, not a
// test): per bounded JSON schema, XGrammar's compile time, and per constrained token the
// scheduler CPU — FillNextTokenBitmask (the mask a plan carries; on the mask threads) and
// Accept (the sampled token coming back) — while a valid document is generated through the masks
// (each step takes the longest allowed token that continues the document).
//   bazel run -c opt //scheduler/grammar:grammar_benchmark -- models/<model>.gguf [rounds]
// Prints one line per schema and the mean over all of them.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "common/gguf.h"
#include "common/tokenizer.h"
#include "scheduler/grammar/grammar_engine.h"

namespace weft {
namespace {

struct Case {
  const char* name;
  const char* schema;  // a JSON schema, or a structural tag (tool_call)
  const char* document;
  GrammarConstraint::Kind kind = GrammarConstraint::Kind::kJsonSchema;
};

const Case kCases[] = {
    {"person",
     R"({"type":"object","properties":{"name":{"type":"string","maxLength":20},)"
     R"("age":{"type":"integer","minimum":0,"maximum":120},"email":{"type":"string",)"
     R"("maxLength":30}},"required":["name","age"],"additionalProperties":false})",
     R"({"name": "Ada Lovelace", "age": 36, "email": "ada@example.org"})"},
    {"address",
     R"({"type":"object","properties":{"address":{"type":"object","properties":{"city":)"
     R"({"type":"string","maxLength":16},"zip":{"type":"string","pattern":"^[0-9]{5}$"}},)"
     R"("required":["city","zip"],"additionalProperties":false}},"required":["address"],)"
     R"("additionalProperties":false})",
     R"({"address": {"city": "Paris", "zip": "75001"}})"},
    {"tags",
     R"({"type":"object","properties":{"tags":{"type":"array","items":{"type":"string",)"
     R"("maxLength":8},"maxItems":3}},"required":["tags"],"additionalProperties":false})",
     R"({"tags": ["red", "fast", "new"]})"},
    {"color",
     R"({"type":"object","properties":{"color":{"enum":["red","green","blue"]}},)"
     R"("required":["color"],"additionalProperties":false})",
     R"({"color": "green"})"},
    {"scores",
     R"({"type":"object","properties":{"count":{"type":"integer","minimum":-5,"maximum":5},)"
     R"("ok":{"type":"boolean"},"level":{"type":"integer","minimum":1,"maximum":3}},)"
     R"("required":["count","ok"],"additionalProperties":false})",
     R"({"count": -3, "ok": true, "level": 2})"},
    // A tool call (openai_tools.cc's form): its arguments' schema inside a structural tag.
    {"tool_call",
     R"({"type":"structural_tag","format":{"type":"tag","begin":"<tool_call>\n{\"name\": )"
     R"(\"get_weather\", \"arguments\": ","content":{"type":"json_schema","json_schema":)"
     R"({"type":"object","properties":{"city":{"type":"string","maxLength":20},"unit":)"
     R"({"enum":["celsius","fahrenheit"]}},"required":["city","unit"],)"
     R"("additionalProperties":false},"max_whitespace_cnt":1},"end":"}\n</tool_call>"}})",
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
     "\"unit\": \"celsius\"}}\n</tool_call>",
     GrammarConstraint::Kind::kStructuralTag},
    // Above string_length_lowering.h's limit (128): XGrammar's own counted repetition.
    {"note",
     R"({"type":"object","properties":{"note":{"type":"string","maxLength":500}},)"
     R"("required":["note"],"additionalProperties":false})",
     R"({"note": "Meet at noon by the old bridge, bring the maps."})"},
};

int Run(const std::string& path, int rounds) {
  auto gguf = GgufFile::OpenMetadata(path);
  if (!gguf.ok()) {
    std::fprintf(stderr, "%s\n", std::string(gguf.status().message()).c_str());
    return 1;
  }
  auto tok = Tokenizer::FromGguf(**gguf);
  if (!tok.ok()) return 1;
  const GrammarVocab vocab = GrammarVocabFromTokenizer(**tok, (*tok)->vocab_size(), ToolCallFormat::kHermes);
  const absl::Time t0 = absl::Now();
  // A benchmark measures compiles, never refuses them (the scheduler caps them at
  // GrammarEngineOptions' default compile_timeout).
  GrammarEngineOptions options;
  options.compile_timeout = absl::Seconds(600);
  auto engine = GrammarEngine::Create(vocab, options);
  if (!engine.ok()) return 1;
  std::printf("vocabulary %d tokens; tokenizer info %.1f ms\n", vocab.vocab_size,
              absl::ToDoubleMilliseconds(absl::Now() - t0));
  std::vector<uint32_t> words(BitmaskWords(vocab.vocab_size));
  double all_fill = 0, all_accept = 0;
  int64_t all_tokens = 0;
  for (const Case& c : kCases) {
    GrammarConstraint gc;
    gc.kind = c.kind;
    gc.source = c.schema;
    const absl::Time s = absl::Now();
    GrammarFuture f = (*engine)->CompileAsync(gc);
    if (!f.Wait(absl::Seconds(600)) || !f.result().ok()) {
      std::fprintf(stderr, "%s: does not compile: %s\n", c.name,
                   std::string(f.result().status().message()).c_str());
      return 1;
    }
    const double compile_ms = absl::ToDoubleMilliseconds(absl::Now() - s);
    auto grammar = *f.result();
    absl::Duration fill, accept;
    int64_t tokens = 0;
    const std::string doc = c.document;
    for (int r = 0; r < rounds; ++r) {
      GrammarMatcherState m(grammar);
      for (size_t pos = 0; pos <= doc.size();) {
        const absl::Time a = absl::Now();
        m.FillNextTokenBitmask(words.data());
        fill += absl::Now() - a;
        int32_t best = -1;
        size_t len = 0;
        for (int32_t t = 0; t < vocab.vocab_size && pos < doc.size(); ++t) {
          const std::string& b = vocab.token_bytes[t];
          if ((words[t / 32] >> (t % 32) & 1) && !b.empty() && b.size() > len &&
              doc.compare(pos, b.size(), b) == 0) {
            best = t;
            len = b.size();
          }
        }
        if (pos == doc.size()) best = vocab.stop_token_ids.front(), len = 1;
        if (best < 0) {
          std::fprintf(stderr, "%s: no allowed token at %zu\n", c.name, pos);
          return 1;
        }
        const absl::Time b = absl::Now();
        if (!m.Accept(best).ok()) return 1;
        accept += absl::Now() - b;
        ++tokens;
        pos += len;
      }
    }
    const double fill_us = absl::ToDoubleMicroseconds(fill) / tokens;
    const double accept_us = absl::ToDoubleMicroseconds(accept) / tokens;
    std::printf("%-8s compile %7.1f ms   per token: mask %6.1f us, accept %5.1f us   (%lld tokens)\n",
                c.name, compile_ms, fill_us, accept_us, static_cast<long long>(tokens / rounds));
    all_fill += absl::ToDoubleMicroseconds(fill);
    all_accept += absl::ToDoubleMicroseconds(accept);
    all_tokens += tokens;
  }
  std::printf("mean per constrained token: mask %.1f us + accept %.1f us = %.1f us of scheduler CPU\n",
              all_fill / all_tokens, all_accept / all_tokens,
              (all_fill + all_accept) / all_tokens);
  return 0;
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: grammar_benchmark MODEL.gguf [rounds]\n");
    return 2;
  }
  return weft::Run(argv[1], argc > 2 ? std::atoi(argv[2]) : 20);
}

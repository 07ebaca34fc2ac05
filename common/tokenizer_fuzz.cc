// libFuzzer target: Tokenizer::Encode on arbitrary bytes (invalid UTF-8 included), then
// Decode and incremental detokenization, with the default model's real vocabulary.
//
// The vocabulary comes from $WEFT_FUZZ_MODEL (a GGUF path) or else
// $WEFT_MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf. Build and run (clang, separate output
// base so the default gcc cache survives):
//
//   bazel --output_base=$HOME/.cache/bazel-fuzz-tok build --config=fuzz //common:tokenizer_fuzz
//   WEFT_MODEL_DIR=/path/to/models \
//     $HOME/.cache/bazel-fuzz-tok/execroot/weft/bazel-out/k8-dbgfuzz/bin/common/tokenizer_fuzz \
//     -max_total_time=60 -max_len=4096 tests/fuzz_corpus/tokenizer
//
// Checked on every input:
//   * every id is in [0, vocab_size);
//   * without special-token parsing (one fragment: this vocabulary has no user-defined
//     tokens), Decode(Encode(s)) is s as llama.cpp canonicalises it (invalid bytes ->
//     U+FFFD, overlongs re-encoded) minus the bytes that have no token in the
//     vocabulary (llama.cpp drops those too): nothing else is lost or invented;
//   * with special-token parsing, Decode(render_special) gives the same bytes back;
//   * IncrementalDetokenizer's output, token by token, is well-formed UTF-8.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/detokenizer.h"
#include "common/gguf.h"
#include "common/tokenizer.h"
#include "common/tokenizer_unicode.h"

namespace {

struct State {
  std::unique_ptr<weft::GgufFile> file;
  std::unique_ptr<weft::Tokenizer> tok;
  bool has_user_defined = false;
  bool byte_has_token[256] = {};
};

State* g_state = nullptr;

std::string ModelPath() {
  if (const char* p = std::getenv("WEFT_FUZZ_MODEL"); p != nullptr && *p != '\0') return p;
  if (const char* d = std::getenv("WEFT_MODEL_DIR"); d != nullptr && *d != '\0') {
    return std::string(d) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  }
  return "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// Strict well-formedness (no overlongs, surrogates or values above U+10FFFF).
bool WellFormed(const std::string& s) {
  weft::Utf8StreamDecoder d;
  std::string out;
  d.Append(s, &out);
  d.Flush(&out);
  return out == s;
}

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "tokenizer_fuzz: invariant failed: %s\n", what);
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  g_state = new State();
  const std::string path = ModelPath();
  auto file = weft::GgufFile::Open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: cannot open %s (set WEFT_FUZZ_MODEL or "
                 "WEFT_MODEL_DIR): %s\n", path.c_str(), file.status().ToString().c_str());
    std::exit(1);
  }
  auto tok = weft::Tokenizer::FromGguf(**file);
  if (!tok.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: %s\n", tok.status().ToString().c_str());
    std::exit(1);
  }
  g_state->file = std::move(*file);
  g_state->tok = std::move(*tok);
  for (int b = 0; b < 256; ++b) {
    std::string enc;
    weft::tokenizer_internal::AppendByteEncoded(std::string(1, static_cast<char>(b)), &enc);
    g_state->byte_has_token[b] = g_state->tok->FindToken(enc) >= 0;
  }
  for (int32_t id = 0; id < g_state->tok->vocab_size(); ++id) {
    if (g_state->tok->attr(id) & weft::Tokenizer::kAttrUserDefined) {
      g_state->has_user_defined = true;
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const weft::Tokenizer& tok = *g_state->tok;
  const std::string text(reinterpret_cast<const char*>(data), size);

  const std::vector<int32_t> plain = tok.Encode(text, {.parse_special = false});
  for (int32_t id : plain) Check(tok.IsValid(id), "id out of range (plain)");
  if (!g_state->has_user_defined) {
    std::string expected;
    for (char c : weft::tokenizer_internal::CanonicalizeForTokenizer(text)) {
      if (g_state->byte_has_token[static_cast<unsigned char>(c)]) expected.push_back(c);
    }
    Check(tok.Decode(plain) == expected, "Decode(Encode(s, parse_special=false)) != canonical(s)");
  }

  const std::vector<int32_t> ids = tok.Encode(text);
  for (int32_t id : ids) Check(tok.IsValid(id), "id out of range");
  const std::string rendered = tok.Decode(ids, {.render_special = true});
  bool representable = true;
  for (char c : text) representable &= g_state->byte_has_token[static_cast<unsigned char>(c)];
  if (WellFormed(text) && representable) Check(rendered == text, "Decode(render_special) != s");

  weft::IncrementalDetokenizer detok(&tok, {.render_special = true});
  std::string streamed;
  for (int32_t id : ids) {
    const std::string part = detok.Push(id);
    Check(WellFormed(part), "detokenizer emitted ill-formed UTF-8");
    streamed += part;
  }
  streamed += detok.Flush();
  Check(WellFormed(streamed), "detokenizer output ill-formed");
  if (WellFormed(rendered)) Check(streamed == rendered, "streamed != Decode for valid text");
  return 0;
}

// The corpus test across vocabularies: for every vocabulary Weft supports, the ids
// llama.cpp (build 0c1e570) gives each string of the tokenizer corpus
// (tests/testdata/tokenizer_corpus.jsonl's texts: code, CJK, emoji, Arabic, runs of
// spaces and newlines, invalid UTF-8, special-token text inside text, ...) plus a few
// strings of other families' special tokens, with parse_special on and off and with
// add_special, and the vocabulary's special ids, EOG and control sets and every token's
// piece. tools/refdata/make_vocab_corpus_ref.py wrote tests/testdata/tokenizer_vocab/.
// The vocabularies come from the llama-cpp-python sdist tools/bootstrap.sh fetches;
// Gemma 3 270M's GGUF from $WEFT_MODEL_DIR or models/ (skipped, saying so, when absent).
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/gguf.h"
#include "common/testing/llama_cpp_data.h"
#include "common/testing/model_path.h"
#include "common/tokenizer.h"
#include "common/tokenizer_test_util.h"

namespace weft {
namespace {

using testing::EntryBytes;
using testing::FromHex;
using testing::PiecesFnv1a64;
using testing::JsonValue;

std::vector<JsonValue> ReadJsonLines(const std::string& path) {
  std::vector<JsonValue> out;
  auto text = testing::ReadFile(path);
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok()) return out;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    auto v = testing::ParseJson(line);
    EXPECT_TRUE(v.ok()) << v.status();
    if (v.ok()) out.push_back(*std::move(v));
  }
  return out;
}

std::vector<int32_t> ControlRanges(const Tokenizer& tok) {
  std::vector<int32_t> flat;  // first, last, first, last, ...
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (!tok.IsControl(id)) continue;
    if (!flat.empty() && flat.back() + 1 == id) {
      flat.back() = id;
    } else {
      flat.push_back(id);
      flat.push_back(id);
    }
  }
  return flat;
}

std::string Show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) absl::StrAppend(&s, s.empty() ? "" : " ", id);
  return s;
}

class VocabCorpusTest : public ::testing::TestWithParam<const char*> {};

TEST_P(VocabCorpusTest, MatchesLlamaCpp) {
  const std::string name = GetParam();
  std::string path;
  if (name == "gemma-3") {
    path = testing::FindModelFile("gemma-3-270m-q4_k_m.gguf");
    if (path.empty()) {
      GTEST_SKIP() << "gemma-3-270m-q4_k_m.gguf not found in $WEFT_MODEL_DIR or models/";
    }
  } else {
    WEFT_REQUIRE_LLAMA_CPP_DATA(dir);
    path = absl::StrCat(dir, "/models/ggml-vocab-", name, ".gguf");
  }
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto loaded = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Tokenizer& tok = **loaded;

  const std::vector<JsonValue> ref =
      ReadJsonLines(testing::TestDataPath(absl::StrCat("tokenizer_vocab/", name, ".jsonl")));
  const std::vector<JsonValue> base =
      ReadJsonLines(testing::TestDataPath("tokenizer_corpus.jsonl"));
  ASSERT_GE(ref.size(), 300u);
  const JsonValue& m = *ref[0].Get("meta");
  ASSERT_EQ(m.Get("num_base")->number + 1, base.size());
  EXPECT_EQ(tok.vocab_size(), m.Get("vocab_size")->number);
  EXPECT_EQ(tok.bos_id(), m.Get("bos")->number);
  EXPECT_EQ(tok.eos_id(), m.Get("eos")->number);
  // Without an EOT id in the file llama.cpp takes the first EOT-looking token in hash-map
  // order, Weft the lowest id (tokenizer.h): both are end-of-generation tokens, the EOG
  // set is the same.
  const int32_t llama_eot = static_cast<int32_t>(m.Get("eot")->number);
  if (tok.eot_id() != llama_eot) {
    EXPECT_TRUE(tok.IsEog(tok.eot_id()) && tok.IsEog(llama_eot))
        << tok.eot_id() << " vs " << llama_eot;
  }
  EXPECT_EQ(tok.add_bos(), m.Get("add_bos")->b);
  EXPECT_EQ(tok.add_eos(), m.Get("add_eos")->b);
  EXPECT_EQ(tok.eog_ids(), m.Get("eog")->Ints());
  std::vector<int32_t> control;
  for (const JsonValue& r : m.Get("control")->array) {
    for (int32_t id : r.Ints()) control.push_back(id);
  }
  EXPECT_EQ(ControlRanges(tok), control);
  EXPECT_EQ(PiecesFnv1a64(tok, false), m.Get("pieces_fnv1a64")->str);
  EXPECT_EQ(PiecesFnv1a64(tok, true), m.Get("pieces_special_fnv1a64")->str);

  int failed = 0;
  const EncodeOptions no_bos_eos{.add_bos = false, .add_eos = false};
  for (size_t k = 1; k < ref.size(); ++k) {
    const JsonValue& e = ref[k];
    const size_t i = static_cast<size_t>(e.Get("i")->number);
    const std::string text =
        e.Get("text") != nullptr ? e.Get("text")->str : EntryBytes(base[i + 1]);
    const std::vector<int32_t> want = e.Get("ids")->Ints();
    EncodeOptions o = no_bos_eos;
    const std::vector<int32_t> got = tok.Encode(text, o);
    o.parse_special = false;
    const JsonValue* plain = e.Get("ids_plain");
    const std::vector<int32_t> got_plain = tok.Encode(text, o);
    std::vector<int32_t> want_special;
    if (const JsonValue* s = e.Get("ids_special")) {
      want_special = s->Ints();
    } else {
      if (tok.add_bos()) want_special.push_back(tok.bos_id());
      want_special.insert(want_special.end(), want.begin(), want.end());
      if (tok.add_eos()) want_special.push_back(tok.eos_id());
    }
    const bool ok = got == want && got_plain == (plain != nullptr ? plain->Ints() : want) &&
                    tok.Encode(text) == want_special;
    if (!ok) {
      ++failed;
      ADD_FAILURE() << name << " entry " << i << " \"" << absl::CEscape(text)
                    << "\"\n  want: " << Show(want) << "\n  got:  " << Show(got);
    }
  }
  std::cerr << name << ": " << ref.size() - 1 - failed << "/" << ref.size() - 1
            << " corpus strings equal to llama.cpp\n";
  EXPECT_EQ(failed, 0);
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, VocabCorpusTest,
                         ::testing::Values("llama-spm", "phi-3", "llama-bpe", "qwen2", "qwen35",
                                           "gpt-2", "mpt", "starcoder", "refact", "command-r",
                                           "falcon", "deepseek-llm", "deepseek-coder", "gemma-4",
                                           "gemma-3"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s) {
                             if (c == '-') c = '_';
                           }
                           return s;
                         });

}  // namespace
}  // namespace weft

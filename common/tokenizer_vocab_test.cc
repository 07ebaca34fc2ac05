// Weft's tokenizer against llama.cpp's own tokenizer tests: every vocabulary-only GGUF
// of llama.cpp's models/ folder (from the llama-cpp-python sdist tools/bootstrap.sh
// fetches; never committed) that Weft supports gives, for every text of its .inp file,
// exactly the ids of its .out file (llama_tokenize with add_special and parse_special
// false, as llama.cpp's test-tokenizer-0 runs them). The vocabularies Weft refuses are
// refused at load with an error naming the tokenizer.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/gguf.h"
#include "common/testing/llama_cpp_data.h"
#include "common/tokenizer.h"
#include "common/tokenizer_test_util.h"

namespace weft {
namespace {

using ::testing::HasSubstr;

struct Pair {
  std::string text;
  std::vector<int32_t> ids;
};

// test-tokenizer-0's reader: texts separated by "\n__ggml_vocab_test__\n", one line of
// space-separated ids per text.
std::vector<Pair> ReadPairs(const std::string& base) {
  auto inp = testing::ReadFile(base + ".inp");
  auto out = testing::ReadFile(base + ".out");
  EXPECT_TRUE(inp.ok() && out.ok()) << base;
  if (!inp.ok() || !out.ok()) return {};
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp->size();) {
    const size_t next = inp->find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp->substr(pos));
      break;
    }
    texts.push_back(inp->substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<std::string> lines = absl::StrSplit(*out, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  EXPECT_EQ(texts.size(), lines.size()) << base;
  std::vector<Pair> pairs;
  for (size_t i = 0; i < texts.size() && i < lines.size(); ++i) {
    Pair p{texts[i], {}};
    for (absl::string_view tok : absl::StrSplit(absl::StripAsciiWhitespace(lines[i]), ' ',
                                                absl::SkipEmpty())) {
      int32_t id;
      EXPECT_TRUE(absl::SimpleAtoi(tok, &id)) << base << " line " << i;
      p.ids.push_back(id);
    }
    pairs.push_back(std::move(p));
  }
  return pairs;
}

std::string Show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) absl::StrAppend(&s, s.empty() ? "" : " ", id);
  return s;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path) {
  auto file = GgufFile::Open(path);
  if (!file.ok()) return file.status();
  return Tokenizer::FromGguf(**file);
}

class VocabPairsTest : public ::testing::TestWithParam<const char*> {};

TEST_P(VocabPairsTest, EveryPairGivesLlamaCppIds) {
  WEFT_REQUIRE_LLAMA_CPP_DATA(dir);
  const std::string base = absl::StrCat(dir, "/models/ggml-vocab-", GetParam(), ".gguf");
  auto tok = Load(base);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::vector<Pair> pairs = ReadPairs(base);
  ASSERT_GE(pairs.size(), 40u);
  int failed = 0;
  for (const Pair& p : pairs) {
    const std::vector<int32_t> got =
        (*tok)->Encode(p.text, {.add_bos = false, .add_eos = false, .parse_special = false});
    if (got != p.ids) {
      ++failed;
      ADD_FAILURE() << GetParam() << ": \"" << absl::CEscape(p.text) << "\"\n  want: "
                    << Show(p.ids) << "\n  got:  " << Show(got);
    }
  }
  std::cerr << GetParam() << ": " << pairs.size() - failed << "/" << pairs.size()
            << " pairs equal\n";
  EXPECT_EQ(failed, 0);
}

INSTANTIATE_TEST_SUITE_P(Supported, VocabPairsTest,
                         ::testing::Values("llama-spm", "phi-3", "llama-bpe", "qwen2", "qwen35",
                                           "gpt-2", "mpt", "starcoder", "refact", "command-r",
                                           "falcon", "deepseek-llm", "deepseek-coder",
                                           "gemma-4"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

TEST(VocabLoadTest, VocabulariesWithoutPairsLoad) {
  WEFT_REQUIRE_LLAMA_CPP_DATA(dir);
  // aquila and gpt-neox: gpt2 without tokenizer.ggml.pre ("default"); baichuan: SPM.
  for (const char* name : {"aquila", "gpt-neox", "baichuan"}) {
    auto tok = Load(absl::StrCat(dir, "/models/ggml-vocab-", name, ".gguf"));
    EXPECT_TRUE(tok.ok()) << name << ": " << tok.status();
  }
}

TEST(VocabLoadTest, UnsupportedTokenizersAreRefusedByName) {
  WEFT_REQUIRE_LLAMA_CPP_DATA(dir);
  auto bert = Load(absl::StrCat(dir, "/models/ggml-vocab-bert-bge.gguf"));
  EXPECT_EQ(bert.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(bert.status().message()), HasSubstr("'bert'"));
  auto t5 = Load(absl::StrCat(dir, "/models/ggml-vocab-nomic-bert-moe.gguf"));
  EXPECT_EQ(t5.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(t5.status().message()), HasSubstr("'t5'"));
}

}  // namespace
}  // namespace weft

// The corpus test: Weft's tokenizer must give exactly llama.cpp's ids (and decoded
// bytes) for every string of tests/testdata/tokenizer_corpus.jsonl, which
// tools/refdata/make_tokenizer_ref.py wrote with llama.cpp build 0c1e570 and the
// default model.
#include <cstdlib>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/detokenizer.h"
#include "common/gguf.h"
#include "common/testing/model_path.h"
#include "common/tokenizer.h"
#include "common/tokenizer_test_util.h"

namespace weft {
namespace {

using testing::EntryBytes;
using testing::FromHex;
using testing::PiecesFnv1a64;
using testing::JsonValue;

struct Corpus {
  JsonValue meta;
  std::vector<JsonValue> entries;
};

// $WEFT_TOKENIZER_CORPUS replaces the committed corpus, e.g. with a large random one
// from `make_tokenizer_ref.py --random_corpus N` (differential testing).
std::string CorpusPath() {
  const char* env = std::getenv("WEFT_TOKENIZER_CORPUS");
  if (env != nullptr && *env != '\0') return env;
  return testing::TestDataPath("tokenizer_corpus.jsonl");
}

Corpus LoadCorpus() {
  Corpus c;
  auto text = testing::ReadFile(CorpusPath());
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok()) return c;
  bool first = true;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    auto v = testing::ParseJson(line);
    EXPECT_TRUE(v.ok()) << v.status() << " in line: " << line;
    if (!v.ok()) continue;
    if (first) {
      c.meta = *v->Get("meta");
      first = false;
    } else {
      c.entries.push_back(*std::move(v));
    }
  }
  return c;
}

std::string Show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) absl::StrAppend(&s, s.empty() ? "" : " ", id);
  return s;
}

class TokenizerCorpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = testing::FindModelFile();
    if (path.empty()) GTEST_SKIP() << "default model not found (set WEFT_MODEL_DIR)";
    auto file = GgufFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    auto tok = Tokenizer::FromGguf(**file);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(*tok);
    corpus_ = LoadCorpus();
    ASSERT_GE(corpus_.entries.size(), 200u);
  }

  std::unique_ptr<Tokenizer> tok_;
  Corpus corpus_;
};

TEST_F(TokenizerCorpusTest, VocabularyMetadataMatchesLlamaCpp) {
  const JsonValue& m = corpus_.meta;
  EXPECT_EQ(tok_->vocab_size(), m.Get("vocab_size")->number);
  EXPECT_EQ(tok_->bos_id(), m.Get("bos")->number);
  EXPECT_EQ(tok_->eos_id(), m.Get("eos")->number);
  EXPECT_EQ(tok_->eot_id(), m.Get("eot")->number);
  EXPECT_EQ(tok_->add_bos(), m.Get("add_bos")->b);
  EXPECT_EQ(tok_->add_eos(), m.Get("add_eos")->b);
  EXPECT_EQ(tok_->eog_ids(), m.Get("eog")->Ints());
  std::vector<int32_t> control;
  for (int32_t id = 0; id < tok_->vocab_size(); ++id) {
    if (tok_->IsControl(id)) control.push_back(id);
  }
  EXPECT_EQ(control, m.Get("control")->Ints());
  // Every token's piece, as llama_token_to_piece(special=false/true) gives it.
  EXPECT_EQ(PiecesFnv1a64(*tok_, false), m.Get("pieces_fnv1a64")->str);
  EXPECT_EQ(PiecesFnv1a64(*tok_, true), m.Get("pieces_special_fnv1a64")->str);
}

TEST_F(TokenizerCorpusTest, EveryStringGivesLlamaCppIds) {
  int checked = 0, failed = 0;
  for (const JsonValue& e : corpus_.entries) {
    const std::string text = EntryBytes(e);
    const std::vector<int32_t> want = e.Get("ids")->Ints();
    const std::vector<int32_t> got = tok_->Encode(text);
    ++checked;
    if (got != want) {
      ++failed;
      ADD_FAILURE() << "entry " << e.Get("i")->number << " (" << e.Get("cat")->str
                    << ") text=\"" << absl::CEscape(text) << "\"\n  want: " << Show(want)
                    << "\n  got:  " << Show(got);
    }
    const JsonValue* plain = e.Get("ids_plain");
    const std::vector<int32_t> want_plain = plain != nullptr ? plain->Ints() : want;
    EXPECT_EQ(tok_->Encode(text, {.parse_special = false}), want_plain)
        << "parse_special=false, entry " << e.Get("i")->number;
  }
  EXPECT_EQ(failed, 0);
  EXPECT_GE(checked, 200);
  std::cerr << "corpus: " << checked << " strings, " << failed << " mismatches\n";
}

TEST_F(TokenizerCorpusTest, DecodingMatchesLlamaCppAndRoundTrips) {
  int round_trips = 0;
  for (const JsonValue& e : corpus_.entries) {
    const std::string text = EntryBytes(e);
    const std::vector<int32_t> ids = e.Get("ids")->Ints();
    const JsonValue* dec = e.Get("decoded_hex");
    const JsonValue* dec_special = e.Get("decoded_special_hex");
    EXPECT_EQ(tok_->Decode(ids), dec != nullptr ? FromHex(dec->str) : text)
        << "entry " << e.Get("i")->number;
    EXPECT_EQ(tok_->Decode(ids, {.render_special = true}),
              dec_special != nullptr ? FromHex(dec_special->str) : text)
        << "entry " << e.Get("i")->number;
    // decode(encode(s)) == s for strings without special tokens (valid UTF-8 ones).
    if (dec == nullptr) {
      EXPECT_EQ(tok_->Decode(tok_->Encode(text)), text);
      ++round_trips;
    }
  }
  EXPECT_GE(round_trips, 200);
}

TEST_F(TokenizerCorpusTest, IncrementalDetokenizationIsSanitizedDecode) {
  for (const JsonValue& e : corpus_.entries) {
    const std::vector<int32_t> ids = e.Get("ids")->Ints();
    IncrementalDetokenizer detok(tok_.get(), {.render_special = true});
    std::string streamed;
    for (int32_t id : ids) streamed += detok.Push(id);
    streamed += detok.Flush();
    // llama.cpp's bytes, made well-formed in one go (U+FFFD for invalid subparts).
    const JsonValue* dec = e.Get("decoded_special_hex");
    const std::string bytes = dec != nullptr ? FromHex(dec->str) : EntryBytes(e);
    Utf8StreamDecoder whole;
    std::string want;
    whole.Append(bytes, &want);
    whole.Flush(&want);
    EXPECT_EQ(streamed, want) << "entry " << e.Get("i")->number;
    if (e.Get("text") != nullptr && dec == nullptr) {
      EXPECT_EQ(streamed, bytes);
    }
  }
}

// The prompts of the llama.cpp model reference data (tools/refdata/make_llama_ref.py)
// tokenize to the ids llama.cpp used: the perplexity text as llama-perplexity reads it
// (one trailing newline dropped, special tokens not parsed) and the greedy/logits
// prompts with special tokens parsed.
TEST_F(TokenizerCorpusTest, LlamaReferencePromptsTokenizeAsLlamaCpp) {
  auto text = testing::ReadFile(testing::TestDataPath("ppl_text.txt"));
  ASSERT_TRUE(text.ok()) << text.status();
  std::string ppl = *text;
  if (!ppl.empty() && ppl.back() == '\n') ppl.pop_back();
  auto topk = testing::ReadFile(testing::TestDataPath("llama_ref_topk.json"));
  ASSERT_TRUE(topk.ok()) << topk.status();
  auto topk_json = testing::ParseJson(*topk);
  ASSERT_TRUE(topk_json.ok()) << topk_json.status();
  const std::vector<int32_t> want = topk_json->Get("tokens")->Ints();
  EXPECT_GE(want.size(), 2100u);
  EXPECT_EQ(tok_->Encode(ppl, {.parse_special = false}), want);

  int prompts = 0;
  for (const char* file : {"llama_ref_greedy.json", "llama_ref_logits.json"}) {
    auto data = testing::ReadFile(testing::TestDataPath(file));
    ASSERT_TRUE(data.ok()) << data.status();
    auto json = testing::ParseJson(*data);
    ASSERT_TRUE(json.ok()) << json.status();
    const JsonValue* list = json->Get("cases") != nullptr ? json->Get("cases") : json->Get("prompts");
    ASSERT_NE(list, nullptr);
    for (const JsonValue& c : list->array) {
      EXPECT_EQ(tok_->Encode(c.Get("prompt")->str), c.Get("prompt_ids")->Ints())
          << file << ": " << c.Get("prompt")->str;
      ++prompts;
    }
  }
  EXPECT_EQ(prompts, 17);
}

}  // namespace
}  // namespace weft

#include "common/tokenizer.h"

#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/gguf.h"
#include "common/testing/gguf_builder.h"
#include "common/testing/model_path.h"
#include "common/testing/status_matchers.h"
#include "common/tokenizer_pretokenize.h"
#include "common/tokenizer_unicode.h"

namespace weft {
namespace {

using ::weft::testing::StatusIs;

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using testing::GgufBuilder;
using tokenizer_internal::AppendByteEncoded;
using tokenizer_internal::ByteToUnicode;
using tokenizer_internal::CanonicalizeForTokenizer;
using tokenizer_internal::ClassOf;
using tokenizer_internal::CodepointClass;
using tokenizer_internal::DecodeCodepoint;
using tokenizer_internal::IsCanonicalForTokenizer;
using tokenizer_internal::UnicodeToByte;

// ---------------------------------------------------------------------------------
// Unicode helpers.

TEST(TokenizerUnicodeTest, ByteToUnicodeIsGpt2Table) {
  EXPECT_EQ(ByteToUnicode('a'), uint32_t{'a'});
  EXPECT_EQ(ByteToUnicode('!'), uint32_t{'!'});
  EXPECT_EQ(ByteToUnicode(0xA1), 0xA1u);
  EXPECT_EQ(ByteToUnicode(0xFF), 0xFFu);
  EXPECT_EQ(ByteToUnicode(0x00), 0x100u);
  EXPECT_EQ(ByteToUnicode(' '), 0x120u);   // "Ġ"
  EXPECT_EQ(ByteToUnicode('\n'), 0x10Au);  // "Ċ"
  EXPECT_EQ(ByteToUnicode(0xAD), 0x143u);  // the last one
  std::vector<bool> seen(0x144, false);
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = ByteToUnicode(static_cast<uint8_t>(b));
    ASSERT_LT(cp, seen.size());
    EXPECT_FALSE(seen[cp]) << "byte " << b;
    seen[cp] = true;
    EXPECT_EQ(UnicodeToByte(cp), b);
  }
  EXPECT_EQ(UnicodeToByte(0x20), -1);
  EXPECT_EQ(UnicodeToByte(0x144), -1);
  EXPECT_EQ(UnicodeToByte(0x4E00), -1);
  std::string enc;
  AppendByteEncoded(" hi\n", &enc);
  EXPECT_EQ(enc, "\xC4\xA0hi\xC4\x8A");
}

TEST(TokenizerUnicodeTest, ClassesFollowLlamaCppTables) {
  EXPECT_EQ(ClassOf('A'), CodepointClass::kLetter);
  EXPECT_EQ(ClassOf('z'), CodepointClass::kLetter);
  EXPECT_EQ(ClassOf('7'), CodepointClass::kNumber);
  EXPECT_EQ(ClassOf(' '), CodepointClass::kWhitespace);
  EXPECT_EQ(ClassOf('\n'), CodepointClass::kWhitespace);
  EXPECT_EQ(ClassOf(0x0B), CodepointClass::kWhitespace);
  EXPECT_EQ(ClassOf('!'), CodepointClass::kOther);
  EXPECT_EQ(ClassOf(0x00), CodepointClass::kOther);
  EXPECT_EQ(ClassOf(0x85), CodepointClass::kWhitespace);
  EXPECT_EQ(ClassOf(0xA0), CodepointClass::kWhitespace);
  EXPECT_EQ(ClassOf(0xE9), CodepointClass::kLetter);    // é
  EXPECT_EQ(ClassOf(0xB2), CodepointClass::kNumber);    // ²
  EXPECT_EQ(ClassOf(0x301), CodepointClass::kOther);    // combining acute (Mn)
  EXPECT_EQ(ClassOf(0x661), CodepointClass::kNumber);   // Arabic-Indic one
  EXPECT_EQ(ClassOf(0x2160), CodepointClass::kNumber);  // Roman numeral one (Nl)
  EXPECT_EQ(ClassOf(0x200B), CodepointClass::kOther);   // zero width space: not \s
  EXPECT_EQ(ClassOf(0x3000), CodepointClass::kWhitespace);
  EXPECT_EQ(ClassOf(0x4E00), CodepointClass::kLetter);
  EXPECT_EQ(ClassOf(0x1F600), CodepointClass::kOther);
  EXPECT_EQ(ClassOf(0x20000), CodepointClass::kLetter);
  EXPECT_EQ(ClassOf(0x10FFFF), CodepointClass::kOther);
  EXPECT_EQ(ClassOf(0x110000), CodepointClass::kOther);
}

uint32_t DecodeOne(absl::string_view s, size_t* len) {
  size_t pos = 0;
  const uint32_t cp = DecodeCodepoint(s, &pos);
  *len = pos;
  return cp;
}

TEST(TokenizerUnicodeTest, DecodesLikeLlamaCpp) {
  size_t len;
  EXPECT_EQ(DecodeOne("a", &len), uint32_t{'a'});
  EXPECT_EQ(len, 1u);
  EXPECT_EQ(DecodeOne("\xC3\xA9", &len), 0xE9u);
  EXPECT_EQ(len, 2u);
  EXPECT_EQ(DecodeOne("\xF0\x9F\x98\x80", &len), 0x1F600u);
  EXPECT_EQ(len, 4u);
  // Accepted without range checks: overlong and surrogate.
  EXPECT_EQ(DecodeOne("\xC0\x80", &len), 0u);
  EXPECT_EQ(len, 2u);
  EXPECT_EQ(DecodeOne("\xED\xA0\x80", &len), 0xD800u);
  EXPECT_EQ(len, 3u);
  // Rejected one byte at a time.
  EXPECT_EQ(DecodeOne("\x80", &len), 0xFFFDu);
  EXPECT_EQ(len, 1u);
  EXPECT_EQ(DecodeOne("\xC3", &len), 0xFFFDu);
  EXPECT_EQ(len, 1u);
  EXPECT_EQ(DecodeOne("\xE4\xBD", &len), 0xFFFDu);
  EXPECT_EQ(len, 1u);
  EXPECT_EQ(DecodeOne("\xFF", &len), 0xFFFDu);
  EXPECT_EQ(len, 1u);
  // Above U+10FFFF (llama.cpp aborts): one U+FFFD for the four bytes.
  EXPECT_EQ(DecodeOne("\xF4\x90\x80\x80", &len), 0xFFFDu);
  EXPECT_EQ(len, 4u);
}

TEST(TokenizerUnicodeTest, Canonicalization) {
  EXPECT_TRUE(IsCanonicalForTokenizer(""));
  EXPECT_TRUE(IsCanonicalForTokenizer("plain ascii"));
  EXPECT_TRUE(IsCanonicalForTokenizer("caf\xC3\xA9 \xF0\x9F\x98\x80 \xEF\xBF\xBD"));
  EXPECT_TRUE(IsCanonicalForTokenizer("\xED\xA0\x80"));  // surrogate re-encodes as is
  EXPECT_FALSE(IsCanonicalForTokenizer("\xC0\x80"));
  EXPECT_FALSE(IsCanonicalForTokenizer("a\xC3"));
  EXPECT_FALSE(IsCanonicalForTokenizer("\xF4\x90\x80\x80"));
  EXPECT_EQ(CanonicalizeForTokenizer("\xC0\x80" "a"), std::string("\0a", 2));
  EXPECT_EQ(CanonicalizeForTokenizer("a\xC3"), "a\xEF\xBF\xBD");
  EXPECT_EQ(CanonicalizeForTokenizer("\xE2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(CanonicalizeForTokenizer("\xF5\x80\x80\x80"), "\xEF\xBF\xBD");
}

// ---------------------------------------------------------------------------------
// Pre-tokenizer.

std::vector<std::string> Words(absl::string_view text) {
  static const tokenizer_internal::PreTokenizer* const smollm =
      new tokenizer_internal::PreTokenizer(tokenizer_internal::PreTokenizerKind::kDigitsGpt2);
  tokenizer_internal::PreTokenizeScratch scratch;
  std::vector<absl::string_view> words;
  smollm->Split(text, &scratch, &words);
  return std::vector<std::string>(words.begin(), words.end());
}

TEST(TokenizerPreTokenizeTest, SplitsLikeLlamaCppSmolLm) {
  EXPECT_THAT(Words(""), ElementsAre());
  EXPECT_THAT(Words("Hello world"), ElementsAre("Hello", " world"));
  EXPECT_THAT(Words("Hello, world!"), ElementsAre("Hello", ",", " world", "!"));
  EXPECT_THAT(Words("it's we're I'LL"), ElementsAre("it", "'s", " we", "'re", " I", "'", "LL"));
  EXPECT_THAT(Words("'s"), ElementsAre("'s"));
  EXPECT_THAT(Words("x'"), ElementsAre("x", "'"));
  EXPECT_THAT(Words("12345"), ElementsAre("1", "2", "3", "4", "5"));
  EXPECT_THAT(Words("abc 42"), ElementsAre("abc", " ", "4", "2"));
  // The look-ahead of \s+(?!\S) stops at a digit (the digit is another piece).
  EXPECT_THAT(Words("a   1"), ElementsAre("a", "   ", "1"));
  EXPECT_THAT(Words("a   b"), ElementsAre("a", "  ", " b"));
  EXPECT_THAT(Words("x\n\ny"), ElementsAre("x", "\n", "\n", "y"));
  EXPECT_THAT(Words("trailing  "), ElementsAre("trailing", "  "));
  EXPECT_THAT(Words("hello!!! world"), ElementsAre("hello", "!!!", " world"));
  EXPECT_THAT(Words("  !!"), ElementsAre(" ", " !!"));
  EXPECT_THAT(Words("caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD"),
              ElementsAre("caf\xC3\xA9", " \xE4\xBD\xA0\xE5\xA5\xBD"));
  // U+00A0 is whitespace but not " ": it does not prefix the next word.
  EXPECT_THAT(Words("a\xC2\xA0" "b"), ElementsAre("a", "\xC2\xA0", "b"));
  // Marks are "other": "e" + U+0301 splits.
  EXPECT_THAT(Words("e\xCC\x81"), ElementsAre("e", "\xCC\x81"));
}

std::vector<std::string> WordsOf(tokenizer_internal::PreTokenizerKind kind, absl::string_view text) {
  const tokenizer_internal::PreTokenizer pre(kind);
  tokenizer_internal::PreTokenizeScratch scratch;
  std::vector<absl::string_view> words;
  pre.Split(text, &scratch, &words);
  return std::vector<std::string>(words.begin(), words.end());
}

TEST(TokenizerPreTokenizeTest, Llama3FamilyQuirks) {
  using tokenizer_internal::PreTokenizerKind;
  // Digits in threes (Llama 3) or alone (Qwen 2); contractions in any case.
  EXPECT_THAT(WordsOf(PreTokenizerKind::kLlama3, "12345 IT'S"),
              ElementsAre("123", "45", " IT", "'S"));
  EXPECT_THAT(WordsOf(PreTokenizerKind::kQwen2, "123"), ElementsAre("1", "2", "3"));
  // One non-letter, non-newline code point may lead a letter run; newlines end runs of
  // punctuation and whitespace.
  EXPECT_THAT(WordsOf(PreTokenizerKind::kLlama3, "\tx ?!\n\ny  \n z"),
              ElementsAre("\tx", " ?!\n\n", "y", "  \n", " z"));
  // Qwen 3.5: marks belong to letter runs; Qwen 2: they are punctuation.
  EXPECT_THAT(WordsOf(PreTokenizerKind::kQwen35, "e\xCC\x81t\xCC\x81"),
              ElementsAre("e\xCC\x81t\xCC\x81"));
  EXPECT_THAT(WordsOf(PreTokenizerKind::kQwen2, "e\xCC\x81t"),
              ElementsAre("e", "\xCC\x81t"));
}

TEST(TokenizerPreTokenizeTest, RegexPatternPasses) {
  using tokenizer_internal::PreTokenizerKind;
  // DeepSeek Coder: [\r\n], \s?\p{L}+, \s?\p{P}+, CJK, \p{N}; gaps stay pieces.
  EXPECT_THAT(WordsOf(PreTokenizerKind::kDeepseekCoder, "ab, 12\n$"),
              ElementsAre("ab", ",", " ", "1", "2", "\n", "$"));
  // DeepSeek LLM: \s+$ takes a trailing whitespace run; a long run not at the end is
  // crossed in linear time (a quadratic search would time out here).
  EXPECT_THAT(WordsOf(PreTokenizerKind::kDeepseekLlm, "hi   "), ElementsAre("hi", "   "));
  const std::string spaces(200000, ' ');
  EXPECT_EQ(WordsOf(PreTokenizerKind::kDeepseekLlm, spaces + "x").size(), 2u);
  // Falcon: punctuation and $+<=>^~|` runs first, then GPT-2, then digits in threes.
  EXPECT_THAT(WordsOf(PreTokenizerKind::kFalcon, "a+=1234"), ElementsAre("a", "+=", "123", "4"));
  // Non-ASCII whitespace is \s for std::regex only as U+000B: not in a literal class.
  EXPECT_THAT(WordsOf(PreTokenizerKind::kDeepseekLlm, "\xE3\x80\x80!"),
              ElementsAre("\xE3\x80\x80!"));
}

TEST(TokenizerPreTokenizeTest, TabsBeforeWord) {
  // \s+(?!\S) takes the first tab; the second cannot prefix a word (only " " can).
  EXPECT_THAT(Words("\t\tx"), ElementsAre("\t", "\t", "x"));
  EXPECT_THAT(Words("  x"), ElementsAre(" ", " x"));
}

// ---------------------------------------------------------------------------------
// A tiny handmade vocabulary: specials, then the 256 byte characters, then `extra`.

std::string Enc(absl::string_view raw) {
  std::string out;
  AppendByteEncoded(raw, &out);
  return out;
}

struct TinyVocab {
  std::vector<std::pair<std::string, int32_t>> specials;  // text, token type
  std::vector<std::string> extra;                          // raw texts (byte-encoded here)
  std::vector<std::string> merges;                         // raw "left right"
  std::string model = "gpt2";
  std::string pre = "smollm";
  bool add_bos = false;

  std::vector<uint8_t> Build() const {
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    for (const auto& [text, type] : specials) {
      tokens.push_back(text);
      types.push_back(type);
    }
    for (int b = 0; b < 256; ++b) {
      tokens.push_back(Enc(std::string(1, static_cast<char>(b))));
      types.push_back(1);
    }
    for (const std::string& e : extra) {
      tokens.push_back(Enc(e));
      types.push_back(1);
    }
    std::vector<std::string> enc_merges;
    for (const std::string& m : merges) {
      const size_t sp = m.find(' ', 1);
      enc_merges.push_back(Enc(m.substr(0, sp)) + " " + Enc(m.substr(sp + 1)));
    }
    GgufBuilder b;
    b.AddString("tokenizer.ggml.model", model);
    b.AddString("tokenizer.ggml.pre", pre);
    b.AddStringArray("tokenizer.ggml.tokens", tokens);
    b.AddInt32Array("tokenizer.ggml.token_type", types);
    b.AddStringArray("tokenizer.ggml.merges", enc_merges);
    b.AddUint32("tokenizer.ggml.bos_token_id", 0);
    b.AddUint32("tokenizer.ggml.eos_token_id", 0);
    b.AddBool("tokenizer.ggml.add_bos_token", add_bos);
    return b.Build();
  }
};

class TinyTokenizer {
 public:
  explicit TinyTokenizer(const TinyVocab& v) : vocab_(v), bytes_(v.Build()) {
    auto file = GgufFile::FromBuffer(bytes_.data(), bytes_.size());
    EXPECT_TRUE(file.ok()) << file.status();
    auto t = Tokenizer::FromGguf(**file);
    EXPECT_TRUE(t.ok()) << t.status();
    if (t.ok()) tok_ = std::move(*t);
  }
  const Tokenizer& tok() const { return *tok_; }
  // Id of a raw text in the vocabulary.
  int32_t Id(absl::string_view raw) const {
    for (int32_t i = 0; i < tok_->vocab_size(); ++i) {
      if (tok_->TokenText(i) == Enc(raw) && !tok_->IsControl(i)) return i;
    }
    for (int32_t i = 0; i < tok_->vocab_size(); ++i) {
      if (tok_->TokenText(i) == raw) return i;
    }
    ADD_FAILURE() << "no token " << raw;
    return -1;
  }
  std::vector<int32_t> Ids(std::vector<std::string> raws) const {
    std::vector<int32_t> out;
    for (const auto& r : raws) out.push_back(Id(r));
    return out;
  }

 private:
  TinyVocab vocab_;
  std::vector<uint8_t> bytes_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST(TokenizerBpeTest, LowestRankMergesFirst) {
  TinyVocab v{.specials = {{"<s>", 3}}, .extra = {"ab", "bc"}, .merges = {"b c", "a b"}};
  TinyTokenizer t(v);
  EXPECT_THAT(t.tok().Encode("abc"), ElementsAreArray(t.Ids({"a", "bc"})));
  v.merges = {"a b", "b c"};
  TinyTokenizer t2(v);
  EXPECT_THAT(t2.tok().Encode("abc"), ElementsAreArray(t2.Ids({"ab", "c"})));
}

TEST(TokenizerBpeTest, ChainsMergesAndPrefersLeftmostOnTies) {
  TinyVocab v{.specials = {{"<s>", 3}},
              .extra = {"aa", "ab", "abc", " h", " he", "ll", " hell", " hello"},
              .merges = {"a a", "a b", "ab c", "l l", "  h", " h e", " he ll", " hell o"}};
  TinyTokenizer t(v);
  EXPECT_THAT(t.tok().Encode("abc"), ElementsAreArray(t.Ids({"abc"})));
  EXPECT_THAT(t.tok().Encode("aaa"), ElementsAreArray(t.Ids({"aa", "a"})));
  EXPECT_THAT(t.tok().Encode("aaaa"), ElementsAreArray(t.Ids({"aa", "aa"})));
  EXPECT_THAT(t.tok().Encode(" hello"), ElementsAreArray(t.Ids({" hello"})));
  EXPECT_THAT(t.tok().Encode("hello"), ElementsAreArray(t.Ids({"h", "e", "ll", "o"})));
  EXPECT_EQ(t.tok().Decode(t.tok().Encode(" hello abc")), " hello abc");
}

TEST(TokenizerBpeTest, MergeResultOutsideVocabFallsBackToSingleByteTokens) {
  // llama.cpp looks up each byte of the merged symbol's text as a token.
  TinyVocab v{.specials = {{"<s>", 3}}, .extra = {}, .merges = {"x y"}};
  TinyTokenizer t(v);
  EXPECT_THAT(t.tok().Encode("xy"), ElementsAreArray(t.Ids({"x", "y"})));
}

TEST(TokenizerSpecialTest, SplitsSpecialTokensBeforeBpe) {
  TinyVocab v{.specials = {{"<s>", 3}, {"<|c|>", 3}, {"<u>", 4}}};
  TinyTokenizer t(v);
  const int32_t c = 1, u = 2;
  EXPECT_THAT(t.tok().Encode("x<|c|>y<u>z"),
              ElementsAre(t.Id("x"), c, t.Id("y"), u, t.Id("z")));
  // Without parse_special, control tokens are text but user-defined ones still split.
  EncodeOptions plain;
  plain.parse_special = false;
  const std::vector<int32_t> ids = t.tok().Encode("x<|c|>y<u>z", plain);
  std::vector<int32_t> want = t.Ids({"x", "<", "|", "c", "|", ">", "y"});
  want.push_back(u);
  want.push_back(t.Id("z"));
  EXPECT_THAT(ids, ElementsAreArray(want));
  EXPECT_EQ(t.tok().Decode(ids), "x<|c|>y<u>z");
  // Control tokens decode to nothing unless asked; user-defined ones to their text.
  EXPECT_EQ(t.tok().Decode(t.tok().Encode("x<|c|>y<u>z")), "xy<u>z");
  EXPECT_EQ(t.tok().Decode(t.tok().Encode("x<|c|>y<u>z"), {.render_special = true}),
            "x<|c|>y<u>z");
  EXPECT_EQ(t.tok().TokenBytes(c), "");
  EXPECT_EQ(t.tok().TokenText(c), "<|c|>");
  EXPECT_TRUE(t.tok().IsControl(c));
  EXPECT_FALSE(t.tok().IsControl(u));
}

TEST(TokenizerSpecialTest, LongerSpecialTokensWinAndAreMatchedFirst) {
  TinyVocab v{.specials = {{"<s>", 3}, {"<x>", 3}, {"<x>y", 3}, {"y<", 3}}};
  TinyTokenizer t(v);
  // "<x>y" (longest) claims its occurrences across the whole text before "y<" and "<x>".
  EXPECT_THAT(t.tok().Encode("<x>y<x>"), ElementsAre(2, 1));
  EXPECT_THAT(t.tok().Encode("<x><x>"), ElementsAre(1, 1));
  EXPECT_THAT(t.tok().Encode("ay<b"), ElementsAre(t.Id("a"), 3, t.Id("b")));
}

TEST(TokenizerSpecialTest, BosEosOptions) {
  TinyVocab v{.specials = {{"<s>", 3}}};
  TinyTokenizer t(v);
  EXPECT_FALSE(t.tok().add_bos());
  EXPECT_THAT(t.tok().Encode("a"), ElementsAre(t.Id("a")));
  EXPECT_THAT(t.tok().Encode("a", {.add_bos = true}), ElementsAre(0, t.Id("a")));
  EXPECT_THAT(t.tok().Encode("", {.add_bos = true, .add_eos = true}), ElementsAre(0, 0));
  v.add_bos = true;
  TinyTokenizer t2(v);
  EXPECT_TRUE(t2.tok().add_bos());
  EXPECT_THAT(t2.tok().Encode("a"), ElementsAre(0, t2.Id("a")));
  EXPECT_THAT(t2.tok().Encode("a", {.add_bos = false}), ElementsAre(t2.Id("a")));
}

TEST(TokenizerSpecialTest, DetectsEndOfGenerationTokensByText) {
  // As llama.cpp: <|im_end|> and <|endoftext|> are EOG (and become control tokens even
  // when typed normal); <reponame> is taken for FIM "repo", which is EOG too.
  TinyVocab v{.specials = {{"<s>", 3}, {"<|im_end|>", 1}, {"<|endoftext|>", 3},
                           {"<reponame>", 3}, {"<|im_start|>", 3}}};
  TinyTokenizer t(v);
  EXPECT_THAT(t.tok().eog_ids(), ElementsAre(0, 1, 2, 3));
  EXPECT_TRUE(t.tok().IsEog(1));
  EXPECT_FALSE(t.tok().IsEog(4));
  EXPECT_TRUE(t.tok().IsControl(1));
  EXPECT_EQ(t.tok().eot_id(), 1);
}

TEST(TokenizerLoadTest, RejectsUnsupportedAndMalformedVocabularies) {
  auto load = [](const std::vector<uint8_t>& bytes) {
    auto file = GgufFile::FromBuffer(bytes.data(), bytes.size());
    EXPECT_TRUE(file.ok()) << file.status();
    return Tokenizer::FromGguf(**file).status();
  };
  TinyVocab v;
  v.model = "t5";
  absl::Status s = load(v.Build());
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(std::string(s.message()), HasSubstr("'t5'"));
  v.model = "bert";
  EXPECT_THAT(load(v.Build()), StatusIs(absl::StatusCode::kUnimplemented));
  v.model = "gpt2";
  v.pre = "tekken";  // a pre-tokenizer Weft does not reproduce: refused by name
  s = load(v.Build());
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(std::string(s.message()), HasSubstr("'tekken'"));

  GgufBuilder no_model;
  no_model.AddString("general.architecture", "llama");
  EXPECT_THAT(load(no_model.Build()), StatusIs(absl::StatusCode::kInvalidArgument));

  GgufBuilder no_merges;
  no_merges.AddString("tokenizer.ggml.model", "gpt2");
  no_merges.AddString("tokenizer.ggml.pre", "smollm");
  no_merges.AddStringArray("tokenizer.ggml.tokens", {"a", "b"});
  EXPECT_THAT(load(no_merges.Build()), StatusIs(absl::StatusCode::kInvalidArgument));

  GgufBuilder dup;
  dup.AddString("tokenizer.ggml.model", "gpt2");
  dup.AddString("tokenizer.ggml.pre", "smollm");
  dup.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "a"});
  dup.AddStringArray("tokenizer.ggml.merges", {});
  s = load(dup.Build());
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(s.message()), HasSubstr("repeats"));

  GgufBuilder short_types;
  short_types.AddString("tokenizer.ggml.model", "gpt2");
  short_types.AddString("tokenizer.ggml.pre", "smollm");
  short_types.AddStringArray("tokenizer.ggml.tokens", {"a", "b"});
  short_types.AddInt32Array("tokenizer.ggml.token_type", {1});
  short_types.AddStringArray("tokenizer.ggml.merges", {});
  EXPECT_THAT(load(short_types.Build()), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(TokenizerTest, OutOfRangeIdsDecodeToNothing) {
  TinyVocab v{.specials = {{"<s>", 3}}};
  TinyTokenizer t(v);
  EXPECT_EQ(t.tok().TokenBytes(-1), "");
  EXPECT_EQ(t.tok().TokenBytes(t.tok().vocab_size()), "");
  EXPECT_EQ(t.tok().TokenText(1 << 30), "");
  EXPECT_EQ(t.tok().Decode({-5, t.Id("a"), 1 << 20}), "a");
  EXPECT_FALSE(t.tok().IsControl(-1));
  EXPECT_FALSE(t.tok().IsEog(-1));
}

// ---------------------------------------------------------------------------------
// The default model (SmolLM2-135M-Instruct).

std::unique_ptr<Tokenizer> LoadDefault(const std::string& path) {
  auto file = GgufFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return nullptr;
  auto t = Tokenizer::FromGguf(**file);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(TokenizerModelTest, SpecialIdsMatchLlamaCpp) {
  WEFT_REQUIRE_DEFAULT_MODEL(path);
  auto tok = LoadDefault(path);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->eot_id(), 0);
  EXPECT_FALSE(tok->add_bos());
  EXPECT_FALSE(tok->add_eos());
  EXPECT_THAT(tok->eog_ids(), ElementsAre(0, 2, 4));
  for (int32_t id = 0; id < 17; ++id) EXPECT_TRUE(tok->IsControl(id)) << id;
  EXPECT_FALSE(tok->IsControl(17));
  EXPECT_EQ(tok->TokenText(1), "<|im_start|>");
  EXPECT_EQ(tok->TokenText(2), "<|im_end|>");
  EXPECT_EQ(tok->TokenBytes(2), "");
  EXPECT_EQ(tok->TokenBytes(198), "\n");
  EXPECT_EQ(tok->TokenBytes(216), " ");
  EXPECT_EQ(tok->FindToken("<|im_end|>"), 2);
  EXPECT_EQ(tok->FindToken("\xC4\xA0"), 216);  // "Ġ"
  EXPECT_EQ(tok->FindToken("no such token"), -1);
}

TEST(TokenizerModelTest, BytesWithoutTokensAreDroppedLikeLlamaCpp) {
  WEFT_REQUIRE_DEFAULT_MODEL(path);
  auto tok = LoadDefault(path);
  ASSERT_NE(tok, nullptr);
  // SmolLM2's vocabulary has no token for these bytes' GPT-2 characters.
  for (char c : std::string("\x04\x06\x13\x14\x16\x1D")) {
    EXPECT_THAT(tok->Encode(std::string(1, c)), ElementsAre()) << static_cast<int>(c);
  }
  EXPECT_EQ(tok->Decode(tok->Encode("a\x04" "b")), "ab");
}

TEST(TokenizerModelTest, PromptWithChatMarkup) {
  WEFT_REQUIRE_DEFAULT_MODEL(path);
  auto tok = LoadDefault(path);
  ASSERT_NE(tok, nullptr);
  // Ids from llama.cpp (llama_tokenize, add_special and parse_special true).
  EXPECT_THAT(tok->Encode("Hello world <|im_start|>user\n"),
              ElementsAre(19556, 905, 216, 1, 4093, 198));
  EXPECT_THAT(tok->Encode(""), ElementsAre());
  EXPECT_THAT(tok->Encode("x", {.add_bos = true}), ElementsAre(1, tok->Encode("x")[0]));
  const std::string text = "<|im_start|>user\nHi<|im_end|>\n";
  EXPECT_EQ(tok->Decode(tok->Encode(text), {.render_special = true}), text);
  EXPECT_EQ(tok->Decode(tok->Encode(text)), "user\nHi\n");
}

TEST(TokenizerModelTest, ConcurrentEncodeIsSafeAndDeterministic) {
  WEFT_REQUIRE_DEFAULT_MODEL(path);
  auto tok = LoadDefault(path);
  ASSERT_NE(tok, nullptr);
  const std::string text =
      "The scheduler tokenizes prompts on its planning path; \xE4\xBD\xA0\xE5\xA5\xBD "
      "<|im_start|>assistant\n\xF0\x9F\x98\x80 12345";
  const std::vector<int32_t> want = tok->Encode(text);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) mismatches[t] += tok->Encode(text) != want;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_THAT(mismatches, ElementsAre(0, 0, 0, 0));
}

}  // namespace
}  // namespace weft

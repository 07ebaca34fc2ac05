#include "common/detokenizer.h"

#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/gguf.h"
#include "common/testing/model_path.h"
#include "common/tokenizer.h"

namespace weft {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

// Strict UTF-8 well-formedness (Unicode Table 3-7).
bool IsWellFormedUtf8(absl::string_view s) {
  size_t i = 0;
  auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  while (i < s.size()) {
    const unsigned char c = at(i);
    int n;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    for (int k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      const unsigned char b = at(i + k);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return false;
    }
    i += n + 1;
  }
  return true;
}

std::string DecodeAll(absl::string_view bytes) {
  Utf8StreamDecoder d;
  std::string out;
  d.Append(bytes, &out);
  d.Flush(&out);
  return out;
}

TEST(Utf8StreamDecoderTest, HoldsBackIncompleteCharacters) {
  Utf8StreamDecoder d;
  std::string out;
  d.Append("caf\xC3", &out);
  EXPECT_EQ(out, "caf");
  EXPECT_EQ(d.num_pending_bytes(), 1);
  d.Append("\xA9!", &out);
  EXPECT_EQ(out, "caf\xC3\xA9!");
  EXPECT_EQ(d.num_pending_bytes(), 0);
  out.clear();
  for (char c : std::string("\xF0\x9F\x98\x80")) {
    const size_t before = out.size();
    d.Append(std::string(1, c), &out);
    if (out.size() == before) {
      EXPECT_GT(d.num_pending_bytes(), 0);
    }
  }
  EXPECT_EQ(out, "\xF0\x9F\x98\x80");
  d.Flush(&out);
  EXPECT_EQ(out, "\xF0\x9F\x98\x80");
}

TEST(Utf8StreamDecoderTest, ReplacesMaximalInvalidSubparts) {
  EXPECT_EQ(DecodeAll("\xFF"), kFffd);
  EXPECT_EQ(DecodeAll("\x80"), kFffd);
  EXPECT_EQ(DecodeAll("\xC3" "A"), kFffd + "A");
  EXPECT_EQ(DecodeAll("\xC0\x80"), kFffd + kFffd);            // overlong
  EXPECT_EQ(DecodeAll("\xE0\x80\x80"), kFffd + kFffd + kFffd);
  EXPECT_EQ(DecodeAll("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // surrogate
  EXPECT_EQ(DecodeAll("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);
  EXPECT_EQ(DecodeAll("\xF0\x9F\x98"), kFffd);                  // truncated at the end
  EXPECT_EQ(DecodeAll("\xF0\x9F\x98" "x"), kFffd + "x");
  EXPECT_EQ(DecodeAll("\xE2\x82\xAC\xE2\x82"), "\xE2\x82\xAC" + kFffd);
  // Invalid bytes are replaced as soon as they cannot become valid, not at Flush.
  Utf8StreamDecoder d;
  std::string out;
  d.Append("\xC3" "A", &out);
  EXPECT_EQ(out, kFffd + "A");
  EXPECT_EQ(d.num_pending_bytes(), 0);
}

TEST(Utf8StreamDecoderTest, RandomBytesAnyChunkingGiveTheSameWellFormedText) {
  std::mt19937 rng(1234);
  const std::vector<std::string> pieces = {"a", " ", "\xC3\xA9", "\xE4\xBD\xA0",
                                           "\xF0\x9F\x98\x80", "\xC3", "\x80", "\xFF",
                                           "\xED\xA0\x80", "\xF4\x90", "\xE2\x82"};
  for (int iter = 0; iter < 2000; ++iter) {
    std::string bytes;
    const int n = rng() % 12;
    for (int i = 0; i < n; ++i) {
      if (rng() % 3 == 0) {
        bytes.push_back(static_cast<char>(rng() & 0xFF));
      } else {
        bytes += pieces[rng() % pieces.size()];
      }
    }
    const std::string whole = DecodeAll(bytes);
    ASSERT_TRUE(IsWellFormedUtf8(whole));
    if (IsWellFormedUtf8(bytes)) {
      EXPECT_EQ(whole, bytes);
    }
    Utf8StreamDecoder d;
    std::string chunked;
    size_t pos = 0;
    while (pos < bytes.size()) {
      const size_t len = 1 + rng() % 3;
      std::string part;
      d.Append(absl::string_view(bytes).substr(pos, len), &part);
      ASSERT_TRUE(IsWellFormedUtf8(part));
      chunked += part;
      pos += len;
    }
    d.Flush(&chunked);
    EXPECT_EQ(chunked, whole);
  }
}

TEST(IncrementalDetokenizerTest, EmitsWholeCharactersOnly) {
  WEFT_REQUIRE_DEFAULT_MODEL(path);
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto tok = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status();
  // ZWJ family, skin tone, CJK and an accented word: many byte-level tokens.
  const std::string text =
      "Hi \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 "
      "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xE4\xBD\xA0\xE5\xA5\xBD caf\xC3\xA9<|im_end|>";
  const std::vector<int32_t> ids = (*tok)->Encode(text);
  IncrementalDetokenizer detok(tok->get());
  std::string streamed;
  int held = 0;
  for (int32_t id : ids) {
    const std::string part = detok.Push(id);
    EXPECT_TRUE(IsWellFormedUtf8(part)) << "token " << id;
    if ((*tok)->TokenBytes(id).size() > 0 && part.empty()) ++held;
    streamed += part;
  }
  EXPECT_EQ(detok.Flush(), "");
  EXPECT_GT(held, 0) << "expected some tokens to end inside a character";
  EXPECT_EQ(streamed, text.substr(0, text.size() - 10));  // <|im_end|> is dropped
  EXPECT_EQ(streamed, (*tok)->Decode(ids));

  IncrementalDetokenizer special(tok->get(), {.render_special = true});
  std::string with_special;
  for (int32_t id : ids) special.Push(id, &with_special);
  EXPECT_EQ(with_special, text);
}

TEST(IncrementalDetokenizerTest, TruncatedCharacterAtEndBecomesReplacement) {
  WEFT_REQUIRE_DEFAULT_MODEL(path);
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto tok = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::vector<int32_t> ids = (*tok)->Encode("\xF0\x9F\x98\x80");
  ASSERT_GT(ids.size(), 1u);
  ids.pop_back();  // cut the emoji short
  IncrementalDetokenizer detok(tok->get());
  std::string out;
  for (int32_t id : ids) out += detok.Push(id);
  EXPECT_EQ(out, "");
  EXPECT_GT(detok.num_pending_bytes(), 0);
  EXPECT_EQ(detok.Flush(), kFffd);
}

}  // namespace
}  // namespace weft

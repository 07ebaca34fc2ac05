#include "scheduler/stop_checker.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace {

// Feeds `tokens` and returns every delta (a finish flushes unless a stop matched).
struct FeedResult {
  std::vector<std::string> deltas;
  std::string text;
  bool stopped = false;
  int stop_token = -1;  // index of the token that matched
};

FeedResult Feed(const std::vector<std::string>& tokens, const std::vector<std::string>* stops) {
  StopChecker c(stops);
  FeedResult r;
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string d;
    r.stopped = c.Append(tokens[i], &d);
    r.deltas.push_back(d);
    r.text += d;
    if (r.stopped) {
      r.stop_token = static_cast<int>(i);
      return r;
    }
  }
  std::string d;
  c.Flush(&d);
  r.deltas.push_back(d);
  r.text += d;
  return r;
}

TEST(Utf8Test, Validity) {
  EXPECT_TRUE(IsValidUtf8("plain"));
  EXPECT_TRUE(IsValidUtf8("caf\xC3\xA9 \xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xC3"));            // incomplete
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));        // overlong
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));    // surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // > U+10FFFF
}

TEST(StopCheckerTest, StreamsAsciiAtOnceWithoutStopStrings) {
  FeedResult r = Feed({"Hello", ",", " world"}, nullptr);
  EXPECT_EQ(r.deltas[0], "Hello");
  EXPECT_EQ(r.deltas[2], " world");
  EXPECT_EQ(r.text, "Hello, world");
}

TEST(StopCheckerTest, HoldsSplitCharacterUntilComplete) {
  // "é" = C3 A9; "😀" = F0 9F 98 80 split over three tokens.
  FeedResult r = Feed({"caf\xC3", "\xA9", "\xF0\x9F", "\x98", "\x80!"}, nullptr);
  EXPECT_EQ(r.deltas[0], "caf");
  EXPECT_EQ(r.deltas[1], "\xC3\xA9");
  EXPECT_EQ(r.deltas[2], "");
  EXPECT_EQ(r.deltas[3], "");
  EXPECT_EQ(r.deltas[4], "\xF0\x9F\x98\x80!");
  EXPECT_TRUE(IsValidUtf8(r.text));
}

TEST(StopCheckerTest, InvalidBytesBecomeReplacementCharacters) {
  FeedResult r = Feed({"a\x80", "b\xC3(", "\xE2\x82"}, nullptr);
  // 0x80 stray; C3 followed by '(' is a truncated sequence; E2 82 incomplete at end.
  EXPECT_EQ(r.text, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD(\xEF\xBF\xBD");
  EXPECT_TRUE(IsValidUtf8(r.text));
}

TEST(StopCheckerTest, StopStringAcrossTokensIsNeverStreamed) {
  std::vector<std::string> stops = {"world"};
  FeedResult r = Feed({"Hello wor", "ld! more"}, &stops);
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.stop_token, 1);
  EXPECT_EQ(r.deltas[0], "Hello ");  // "wor" held back
  EXPECT_EQ(r.deltas[1], "");
  EXPECT_EQ(r.text, "Hello ");
}

TEST(StopCheckerTest, HeldTextIsReleasedWhenItDiverges) {
  std::vector<std::string> stops = {"abc"};
  FeedResult r = Feed({"xab", "d", "ab"}, &stops);
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.deltas[0], "x");
  EXPECT_EQ(r.deltas[1], "abd");
  EXPECT_EQ(r.deltas[2], "");    // "ab" could still become "abc"
  EXPECT_EQ(r.deltas[3], "ab");  // flushed at the end
}

TEST(StopCheckerTest, EarliestOfSeveralStopStringsWins) {
  std::vector<std::string> stops = {"cd", "bcx", "b"};
  FeedResult r = Feed({"a", "bcd"}, &stops);
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "a");
}

TEST(StopCheckerTest, StopStringInsideOneToken) {
  std::vector<std::string> stops = {"\n\n"};
  FeedResult r = Feed({"line\n\nnext"}, &stops);
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "line");
}

TEST(StopCheckerTest, MultibyteStopStringSplitMidCharacter) {
  std::vector<std::string> stops = {"\xC3\xA9t\xC3\xA9"};  // "été"
  FeedResult r = Feed({"un \xC3", "\xA9t", "\xC3", "\xA9 chaud"}, &stops);
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "un ");
}

// Property: over random token streams, the concatenated deltas equal the reference
// (the text up to the first stop-string match to appear), every prefix streamed is a
// prefix of that reference (nothing retracted), and all of it is valid UTF-8.
TEST(StopCheckerTest, RandomStreamsMatchReference) {
  std::mt19937 rng(99);
  const std::vector<std::string> alphabet = {"a", "b", "ab", "ba", "\xC3", "\xA9", "\xC3\xA9",
                                             "c", " ", "bb", "\xE2\x82\xAC"};
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<std::string> stops;
    const int num_stops = static_cast<int>(rng() % 3);
    for (int s = 0; s < num_stops; ++s) {
      std::string stop;
      const int len = 1 + static_cast<int>(rng() % 3);
      const char* pieces[] = {"a", "b", "\xC3\xA9", "c"};
      for (int k = 0; k < len; ++k) stop += pieces[rng() % 4];
      stops.push_back(stop);
    }
    std::vector<std::string> tokens;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) tokens.push_back(alphabet[rng() % alphabet.size()]);
    // Reference: after each token, look for any stop string in all text decoded so far;
    // the first token at which one appears stops the stream, truncated at the earliest
    // match in that text. Without a match, the whole text (flushed).
    std::string expected;
    bool expect_stop = false;
    {
      StopChecker plain(nullptr);
      std::string decoded;
      for (auto& t : tokens) {
        plain.Append(t, &decoded);
        size_t match = std::string::npos;
        for (auto& s : stops) match = std::min(match, decoded.find(s));
        if (match != std::string::npos) {
          expected = decoded.substr(0, match);
          expect_stop = true;
          break;
        }
      }
      if (!expect_stop) {
        plain.Flush(&decoded);
        expected = decoded;
      }
    }
    FeedResult r = Feed(tokens, &stops);
    std::string so_far;
    for (auto& d : r.deltas) {
      so_far += d;
      std::string dbg;
      for (auto& t : tokens) dbg += "[" + t + "]";
      dbg += " stops:";
      for (auto& s : stops) dbg += "[" + s + "]";
      ASSERT_EQ(expected.compare(0, so_far.size(), so_far), 0)
          << "retracted text, iter " << iter << " " << dbg << " got " << so_far << " want "
          << expected;
    }
    ASSERT_EQ(r.stopped, expect_stop) << iter;
    ASSERT_EQ(r.text, expected) << iter;
    ASSERT_TRUE(IsValidUtf8(r.text));
  }
}

}  // namespace
}  // namespace weft

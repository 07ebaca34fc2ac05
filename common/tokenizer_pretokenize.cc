#include "common/tokenizer_pretokenize.h"

#include <cstddef>
#include <utility>

#include "common/tokenizer_regex_split.h"

namespace weft::tokenizer_internal {
namespace {

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
class Gpt2Pass : public SplitPass {
 public:
  void Split(const PreTokenizeScratch& s, uint32_t begin, uint32_t end,
             std::vector<uint32_t>* ends) const override {
    // A class for positions outside the piece (llama.cpp's all-zero flags).
    constexpr uint8_t kOutOfRange = 0xFF;
    constexpr auto kLetter = static_cast<uint8_t>(CodepointClass::kLetter);
    constexpr auto kNumber = static_cast<uint8_t>(CodepointClass::kNumber);
    constexpr auto kOther = static_cast<uint8_t>(CodepointClass::kOther);
    constexpr auto kSpace = static_cast<uint8_t>(CodepointClass::kWhitespace);
    auto cls = [&](uint32_t p) {
      return p < end ? static_cast<uint8_t>(s.cls[p]) : kOutOfRange;
    };
    auto cp = [&](uint32_t p) { return p < end ? s.cps[p] : 0xFFFFFFFFu; };
    uint32_t pos = begin;
    while (pos < end) {
      if (const uint32_t n = ContractionLength(s, pos, end); n > 0) {
        pos += n;
        ends->push_back(pos);
        continue;
      }
      const bool space = cp(pos) == ' ';
      // " ?X+" alternatives: the class that decides is the one after an optional space.
      const uint8_t c = space ? cls(pos + 1) : cls(pos);
      if (c == kLetter || c == kNumber || c == kOther) {
        pos += space ? 1 : 0;
        while (cls(pos) == c) ++pos;
        ends->push_back(pos);
        continue;
      }
      uint32_t num_spaces = 0;
      while (cls(pos + num_spaces) == kSpace) ++num_spaces;
      if (num_spaces > 1 && pos + num_spaces < end) {
        pos += num_spaces - 1;  // \s+(?!\S): the last space prefixes the next word
      } else if (num_spaces > 0) {
        pos += num_spaces;  // \s+
      } else {
        ++pos;  // no alternative matched (unreachable: every code point has a class)
      }
      ends->push_back(pos);
    }
  }

 private:
  // Length of a lower-case contraction ('s 't 'm 'd 're 've 'll) at `pos`, or 0.
  static uint32_t ContractionLength(const PreTokenizeScratch& s, uint32_t pos, uint32_t end) {
    if (s.cps[pos] != '\'' || pos + 1 >= end) return 0;
    const uint32_t c1 = s.cps[pos + 1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (pos + 2 >= end) return 0;
    const uint32_t c2 = s.cps[pos + 2];
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
      return 3;
    }
    return 0;
  }
};

// Llama 3 and its variants (see the header). `max_digits` is 3 (Llama 3) or 1 (Qwen);
// `with_marks` makes \p{M} part of letter runs (Qwen 3.5).
class Llama3Pass : public SplitPass {
 public:
  Llama3Pass(uint32_t max_digits, bool with_marks)
      : max_digits_(max_digits), with_marks_(with_marks) {}

  void Split(const PreTokenizeScratch& s, uint32_t begin, uint32_t end,
             std::vector<uint32_t>* ends) const override {
    auto letterish = [&](uint32_t p) {
      return p < end && (s.flags[p].letter() || (with_marks_ && s.flags[p].accent_mark()));
    };
    // [^\s\p{L}\p{N}] (and \p{M} with marks) for a position inside the piece.
    auto punct = [&](uint32_t p) {
      const CodepointFlags f = s.flags[p];
      return !(f.whitespace() || f.letter() || f.number() || (with_marks_ && f.accent_mark()));
    };
    auto newline = [&](uint32_t p) { return p < end && (s.cps[p] == '\r' || s.cps[p] == '\n'); };
    uint32_t pos = begin;
    while (pos < end) {
      const uint32_t c = s.cps[pos];
      const CodepointFlags f = s.flags[pos];
      if (const uint32_t n = ContractionLength(s, pos, end); n > 0) {
        pos += n;
        ends->push_back(pos);
        continue;
      }
      // [^\r\n\p{L}\p{N}]?\p{L}+
      if (!(c == '\r' || c == '\n' || f.number()) && (letterish(pos) || letterish(pos + 1))) {
        ++pos;
        while (letterish(pos)) ++pos;
        ends->push_back(pos);
        continue;
      }
      // \p{N}{1,max_digits}
      if (f.number()) {
        uint32_t run = 0;
        while (pos < end && s.flags[pos].number() && run < max_digits_) {
          ++pos;
          ++run;
        }
        ends->push_back(pos);
        continue;
      }
      //  ?[^\s\p{L}\p{N}]+[\r\n]*  (llama.cpp also takes a lone space at the piece's end
      // this way: the class after it is out of range, which is "not a letter" there)
      const uint32_t q = c == ' ' ? pos + 1 : pos;
      if (q >= end || punct(q)) {
        pos = q;
        while (pos < end && punct(pos)) ++pos;
        while (newline(pos)) ++pos;
        ends->push_back(pos);
        continue;
      }
      uint32_t num_spaces = 0;
      uint32_t last_newline_end = 0;
      while (pos + num_spaces < end && s.flags[pos + num_spaces].whitespace()) {
        if (newline(pos + num_spaces)) last_newline_end = pos + num_spaces + 1;
        ++num_spaces;
      }
      if (last_newline_end > 0) {
        pos = last_newline_end;  // \s*[\r\n]+
      } else if (num_spaces > 1 && pos + num_spaces < end) {
        pos += num_spaces - 1;  // \s+(?!\S)
      } else if (num_spaces > 0) {
        pos += num_spaces;  // \s+
      } else {
        ++pos;  // no alternative matched
      }
      ends->push_back(pos);
    }
  }

 private:
  // (?i:'s|'t|'re|'ve|'m|'ll|'d): only ASCII letters lower-case to these.
  static uint32_t ContractionLength(const PreTokenizeScratch& s, uint32_t pos, uint32_t end) {
    auto lower = [](uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; };
    if (s.cps[pos] != '\'' || pos + 1 >= end) return 0;
    const uint32_t c1 = lower(s.cps[pos + 1]);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (pos + 2 >= end) return 0;
    const uint32_t c2 = lower(s.cps[pos + 2]);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
      return 3;
    }
    return 0;
  }

  uint32_t max_digits_;
  bool with_marks_;
};

// [^\n]+|[\n]+
class NewlinesPass : public SplitPass {
 public:
  void Split(const PreTokenizeScratch& s, uint32_t begin, uint32_t end,
             std::vector<uint32_t>* ends) const override {
    uint32_t pos = begin;
    while (pos < end) {
      const bool newline = s.cps[pos] == '\n';
      while (pos < end && (s.cps[pos] == '\n') == newline) ++pos;
      ends->push_back(pos);
    }
  }
};

// The Han/Hangul/CJK ranges both DeepSeek pre-tokenizers use.
constexpr char kDeepseekCjk[] = "[一-龥ࠀ-一가-퟿]+";

std::vector<std::shared_ptr<const SplitPass>> PassesFor(PreTokenizerKind kind) {
  auto pattern = [](absl::string_view p) { return std::make_shared<PatternPass>(p); };
  auto gpt2 = std::make_shared<Gpt2Pass>();
  switch (kind) {
    case PreTokenizerKind::kWhole:
      return {};
    case PreTokenizerKind::kGpt2:
      return {gpt2};
    case PreTokenizerKind::kDigitsGpt2:
      return {pattern("\\p{N}"), gpt2};
    case PreTokenizerKind::kLlama3:
      return {std::make_shared<Llama3Pass>(3, false)};
    case PreTokenizerKind::kQwen2:
      return {std::make_shared<Llama3Pass>(1, false)};
    case PreTokenizerKind::kQwen35:
      return {std::make_shared<Llama3Pass>(1, true)};
    case PreTokenizerKind::kDeepseekLlm:
      return {
          pattern("[\r\n]"),
          pattern("\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-"
                  "ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-"
                  "ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+"),
          pattern("\\s?[!-/:-~！-／：-～‘-‟　-。]+"),
          pattern("\\s+$"),
          pattern(kDeepseekCjk),
          pattern("\\p{N}+"),
      };
    case PreTokenizerKind::kDeepseekCoder:
      return {pattern("[\r\n]"), pattern("\\s?\\p{L}+"), pattern("\\s?\\p{P}+"),
              pattern(kDeepseekCjk), pattern("\\p{N}")};
    case PreTokenizerKind::kFalcon:
      return {pattern("[\\p{P}\\$\\+<=>\\^~\\|`]+"), gpt2, pattern("[0-9][0-9][0-9]")};
    case PreTokenizerKind::kDefault:
      return {pattern("[\\p{P}\\$\\+<=>\\^~\\|]+"), gpt2, pattern("\\p{N}+"),
              pattern("[0-9][0-9][0-9]")};
    case PreTokenizerKind::kNewlines:
      return {std::make_shared<NewlinesPass>()};
  }
  return {};
}

}  // namespace

PreTokenizer::PreTokenizer(PreTokenizerKind kind) : kind_(kind), passes_(PassesFor(kind)) {}

void PreTokenizer::Split(absl::string_view text, PreTokenizeScratch* scratch,
                         std::vector<absl::string_view>* words) const {
  if (text.empty()) return;
  if (passes_.empty()) {
    words->push_back(text);
    return;
  }
  PreTokenizeScratch& s = *scratch;
  s.cps.clear();
  s.flags.clear();
  s.cls.clear();
  s.offsets.clear();
  size_t pos = 0;
  while (pos < text.size()) {
    s.offsets.push_back(static_cast<uint32_t>(pos));
    const uint32_t cp = DecodeCodepoint(text, &pos);
    s.cps.push_back(cp);
    const CodepointFlags f = FlagsOf(cp);
    s.flags.push_back(f);
    s.cls.push_back(f.whitespace() ? CodepointClass::kWhitespace
                    : f.letter()   ? CodepointClass::kLetter
                    : f.number()   ? CodepointClass::kNumber
                                   : CodepointClass::kOther);
  }
  s.offsets.push_back(static_cast<uint32_t>(text.size()));
  const uint32_t n = static_cast<uint32_t>(s.cps.size());
  s.ends.assign(1, n);
  for (const auto& pass : passes_) {
    s.next_ends.clear();
    uint32_t begin = 0;
    for (uint32_t end : s.ends) {
      pass->Split(s, begin, end, &s.next_ends);
      begin = end;
    }
    s.ends.swap(s.next_ends);
  }
  uint32_t begin = 0;
  for (uint32_t end : s.ends) {
    const uint32_t b = s.offsets[begin];
    words->push_back(text.substr(b, s.offsets[end] - b));
    begin = end;
  }
}

}  // namespace weft::tokenizer_internal

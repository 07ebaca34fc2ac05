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

// \p{N}: every number code point alone (the PatternPass of "\\p{N}", specialised: it
// runs before GPT-2 on the default model's every prompt).
class DigitsPass : public SplitPass {
 public:
  void Split(const PreTokenizeScratch& s, uint32_t begin, uint32_t end,
             std::vector<uint32_t>* ends) const override {
    uint32_t run = begin;
    for (uint32_t i = begin; i < end; ++i) {
      if (s.cls[i] != CodepointClass::kNumber) continue;
      if (i > run) ends->push_back(i);
      ends->push_back(i + 1);
      run = i + 1;
    }
    if (end > run) ends->push_back(end);
  }
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
constexpr char kDeepseekCjk[] = "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+";

std::vector<std::shared_ptr<const SplitPass>> PassesFor(PreTokenizerKind kind) {
  auto pattern = [](absl::string_view p) { return std::make_shared<PatternPass>(p); };
  auto gpt2 = std::make_shared<Gpt2Pass>();
  switch (kind) {
    case PreTokenizerKind::kWhole:
      return {};
    case PreTokenizerKind::kGpt2:
      return {gpt2};
    case PreTokenizerKind::kDigitsGpt2:
      return {std::make_shared<DigitsPass>(), gpt2};
    case PreTokenizerKind::kLlama3:
      return {std::make_shared<Llama3Pass>(3, false)};
    case PreTokenizerKind::kQwen2:
      return {std::make_shared<Llama3Pass>(1, false)};
    case PreTokenizerKind::kQwen35:
      return {std::make_shared<Llama3Pass>(1, true)};
    case PreTokenizerKind::kDeepseekLlm:
      // The regexes of llama-vocab.cpp, their non-ASCII characters as escapes (several,
      // e.g. U+1F7D and U+212A, have canonical singleton decompositions an editor would
      // normalise away).
      return {
          pattern("[\r\n]"),
          pattern("\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4"
                  "-\u0293\u0295-\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388"
                  "-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F\u0531"
                  "-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA\u1CBD-\u1CBF"
                  "\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20"
                  "-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-"
                  "\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-"
                  "\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107\u210A-\u2113\u2115"
                  "\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139\u213C-\u213F"
                  "\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2"
                  "\u2CF3\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E"
                  "\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\U00010400"
                  "-\U0001044F\U000104B0-\U000104D3\U000104D8-\U000104FB\U00010C80-\U00010CB2"
                  "\U00010CC0-\U00010CF2\U000118A0-\U000118DF\U0001E900-\U0001E943]+"),
          pattern("\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+"),
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
  // GPT-2-only pre-tokenizers (the default model's) read the class alone.
  const bool gpt2_only = kind_ == PreTokenizerKind::kGpt2 || kind_ == PreTokenizerKind::kDigitsGpt2;
  while (pos < text.size()) {
    s.offsets.push_back(static_cast<uint32_t>(pos));
    const uint32_t cp = DecodeCodepoint(text, &pos);
    s.cps.push_back(cp);
    if (gpt2_only) {
      s.cls.push_back(ClassOf(cp));
      continue;
    }
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

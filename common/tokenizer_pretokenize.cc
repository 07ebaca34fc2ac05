#include "common/tokenizer_pretokenize.h"

#include <cstddef>

namespace weft::tokenizer_internal {
namespace {

// A class for positions outside the current piece (llama.cpp's all-zero flags).
constexpr uint8_t kOutOfRange = 0xFF;

class Gpt2Splitter {
 public:
  Gpt2Splitter(absl::string_view text, const PreTokenizeScratch& s,
               std::vector<absl::string_view>* words)
      : text_(text), s_(s), words_(words) {}

  // Splits code points [begin, end) (one piece of pass 1).
  void Split(size_t begin, size_t end);

 private:
  uint8_t ClassAt(size_t pos) const {
    return pos < end_ ? static_cast<uint8_t>(s_.cls[pos]) : kOutOfRange;
  }
  uint32_t CpAt(size_t pos) const { return pos < end_ ? s_.cps[pos] : 0xFFFFFFFFu; }
  void Emit(size_t from, size_t to) {
    const uint32_t b = s_.offsets[from];
    words_->push_back(text_.substr(b, s_.offsets[to] - b));
  }
  // Length of a contraction ('s 't 'm 'd 're 've 'll) starting at `pos`, or 0.
  size_t ContractionLength(size_t pos) const;

  absl::string_view text_;
  const PreTokenizeScratch& s_;
  std::vector<absl::string_view>* words_;
  size_t end_ = 0;
};

size_t Gpt2Splitter::ContractionLength(size_t pos) const {
  if (CpAt(pos) != '\'' || pos + 1 >= end_) return 0;
  const uint32_t c1 = CpAt(pos + 1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (pos + 2 >= end_) return 0;
  const uint32_t c2 = CpAt(pos + 2);
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
    return 3;
  }
  return 0;
}

void Gpt2Splitter::Split(size_t begin, size_t end) {
  end_ = end;
  constexpr auto kLetter = static_cast<uint8_t>(CodepointClass::kLetter);
  constexpr auto kNumber = static_cast<uint8_t>(CodepointClass::kNumber);
  constexpr auto kOther = static_cast<uint8_t>(CodepointClass::kOther);
  constexpr auto kSpace = static_cast<uint8_t>(CodepointClass::kWhitespace);
  size_t pos = begin;
  while (pos < end) {
    const size_t start = pos;
    if (const size_t n = ContractionLength(pos); n > 0) {
      Emit(start, pos + n);
      pos += n;
      continue;
    }
    const bool space = CpAt(pos) == ' ';
    // " ?X+" alternatives: the class that decides is the one after an optional space.
    const uint8_t cls = space ? ClassAt(pos + 1) : ClassAt(pos);
    if (cls == kLetter || cls == kNumber || cls == kOther) {
      pos += space ? 1 : 0;
      while (ClassAt(pos) == cls) ++pos;
      Emit(start, pos);
      continue;
    }
    size_t num_spaces = 0;
    while (ClassAt(pos + num_spaces) == kSpace) ++num_spaces;
    if (num_spaces > 1 && pos + num_spaces < end) {
      // \s+(?!\S): leave the last space to prefix the following word.
      pos += num_spaces - 1;
    } else if (num_spaces > 0) {
      pos += num_spaces;  // \s+
    } else {
      ++pos;  // no alternative matched (unreachable: every code point has a class)
    }
    Emit(start, pos);
  }
}

}  // namespace

void PreTokenize(absl::string_view text, PreTokenizeScratch* scratch,
                 std::vector<absl::string_view>* words) {
  PreTokenizeScratch& s = *scratch;
  s.cps.clear();
  s.cls.clear();
  s.offsets.clear();
  size_t pos = 0;
  while (pos < text.size()) {
    s.offsets.push_back(static_cast<uint32_t>(pos));
    const uint32_t cp = DecodeCodepoint(text, &pos);
    s.cps.push_back(cp);
    s.cls.push_back(ClassOf(cp));
  }
  s.offsets.push_back(static_cast<uint32_t>(text.size()));

  // Pass 1 (\p{N}): numbers alone, the runs between them go to pass 2.
  Gpt2Splitter splitter(text, s, words);
  const size_t n = s.cps.size();
  size_t run = 0;
  for (size_t i = 0; i < n; ++i) {
    if (s.cls[i] != CodepointClass::kNumber) continue;
    if (i > run) splitter.Split(run, i);
    splitter.Split(i, i + 1);
    run = i + 1;
  }
  if (n > run) splitter.Split(run, n);
}

}  // namespace weft::tokenizer_internal

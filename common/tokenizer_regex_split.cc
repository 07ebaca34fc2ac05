#include "common/tokenizer_regex_split.h"

#include <string>

#include "glog/logging.h"

namespace weft::tokenizer_internal {
namespace {

uint8_t Bit(Category c) { return static_cast<uint8_t>(1u << static_cast<int>(c)); }

// The code point std::regex sees: llama.cpp replaces non-ASCII whitespace by U+000B.
uint32_t Mapped(uint32_t cp, CodepointFlags flags) {
  return cp > 0x7F && flags.whitespace() ? 0x0B : cp;
}

class PatternParser {
 public:
  explicit PatternParser(absl::string_view pattern) : pattern_(pattern) {
    size_t pos = 0;
    while (pos < pattern.size()) cps_.push_back(DecodeCodepoint(pattern, &pos));
  }

  bool AtEnd() const { return i_ >= cps_.size(); }
  uint32_t Peek() const { return AtEnd() ? 0 : cps_[i_]; }
  uint32_t Next() {
    CHECK(!AtEnd()) << "truncated pre-tokenizer pattern: " << pattern_;
    return cps_[i_++];
  }

  // One atom: \s, \p{..}, an escaped or plain literal, or a bracket expression.
  CharSet Atom() {
    CharSet set;
    if (Peek() == '[') {
      Next();
      CHECK(Peek() != '^') << "negated classes are not supported: " << pattern_;
      while (Peek() != ']') Element(&set, /*in_bracket=*/true);
      Next();
      return set;
    }
    Element(&set, /*in_bracket=*/false);
    return set;
  }

 private:
  // Adds one element (and in a bracket a following "-x" range) to `set`.
  void Element(CharSet* set, bool in_bracket) {
    uint32_t lo;
    if (!Literal(set, &lo)) return;  // \s or \p{..}: no range
    uint32_t hi = lo;
    if (in_bracket && Peek() == '-' && i_ + 1 < cps_.size() && cps_[i_ + 1] != ']') {
      Next();
      CHECK(Literal(set, &hi)) << "range to a class in: " << pattern_;
    }
    CHECK_LE(lo, hi) << pattern_;
    set->ranges.emplace_back(lo, hi);
  }

  // A literal code point (returns true) or a class escape added to `set` (false).
  bool Literal(CharSet* set, uint32_t* cp) {
    const uint32_t c = Next();
    if (c != '\\') {
      *cp = c;
      return true;
    }
    const uint32_t e = Next();
    switch (e) {
      case 's': set->space = true; return false;
      case 'p': set->categories |= Property(); return false;
      case 'r': *cp = '\r'; return true;
      case 'n': *cp = '\n'; return true;
      case 't': *cp = '\t'; return true;
      default:
        CHECK(!(e >= 'a' && e <= 'z') && !(e >= 'A' && e <= 'Z'))
            << "unsupported escape \\" << static_cast<char>(e) << " in: " << pattern_;
        *cp = e;  // \$ \+ \^ \| \[ \] \\ \- ...
        return true;
    }
  }

  // "{X}" after \p: llama.cpp's k_ucat_enum (the letter subcategories collapse to L).
  uint8_t Property() {
    CHECK_EQ(Next(), static_cast<uint32_t>('{')) << pattern_;
    std::string name;
    for (uint32_t c; (c = Next()) != '}';) name.push_back(static_cast<char>(c));
    if (name == "N") return Bit(Category::kNumber);
    if (name == "L" || name == "Lu" || name == "Ll" || name == "Lt" || name == "Lm" ||
        name == "Lo") {
      return Bit(Category::kLetter);
    }
    if (name == "P") return Bit(Category::kPunctuation);
    if (name == "M") return Bit(Category::kAccentMark);
    if (name == "S") return Bit(Category::kSymbol);
    LOG(FATAL) << "unsupported property \\p{" << name << "} in: " << pattern_;
    return 0;
  }

  absl::string_view pattern_;
  std::vector<uint32_t> cps_;
  size_t i_ = 0;
};

}  // namespace

bool CharSet::Contains(uint32_t cp, CodepointFlags flags) const {
  const uint32_t m = Mapped(cp, flags);
  if (space && ((m >= 0x09 && m <= 0x0D) || m == 0x20)) return true;
  if (categories != 0 && m == cp && (categories & Bit(flags.category())) != 0) return true;
  for (const auto& [lo, hi] : ranges) {
    if (m >= lo && m <= hi) return true;
  }
  return false;
}

PatternPass::PatternPass(absl::string_view pattern) {
  PatternParser p(pattern);
  struct Item {
    CharSet set;
    uint32_t quant;  // 0, '?' or '+'
  };
  std::vector<Item> items;
  while (!p.AtEnd() && p.Peek() != '$') {
    Item item{p.Atom(), 0};
    if (p.Peek() == '?' || p.Peek() == '+') item.quant = p.Next();
    items.push_back(std::move(item));
  }
  if (p.Peek() == '$') {
    p.Next();
    anchor_end_ = true;
  }
  CHECK(p.AtEnd() && !items.empty()) << "unsupported pre-tokenizer pattern: " << pattern;
  if (items.back().quant == '+') {
    repeat_ = true;
    CHECK(items.size() == 1 || (items.size() == 2 && items[0].quant == '?'))
        << "unsupported pre-tokenizer pattern: " << pattern;
    if (items.size() == 2) {
      has_prefix_ = true;
      prefix_ = items[0].set;
    }
    atoms_.push_back(items.back().set);
    return;
  }
  CHECK(!anchor_end_) << "unsupported pre-tokenizer pattern: " << pattern;
  for (Item& item : items) {
    CHECK_EQ(item.quant, 0u) << "unsupported pre-tokenizer pattern: " << pattern;
    atoms_.push_back(std::move(item.set));
  }
}

uint32_t PatternPass::MatchAt(const PreTokenizeScratch& s, uint32_t pos, uint32_t end,
                              uint32_t* resume) const {
  auto in = [&](const CharSet& set, uint32_t i) {
    return i < end && set.Contains(s.cps[i], s.flags[i]);
  };
  *resume = pos + 1;
  if (!repeat_) {
    for (size_t k = 0; k < atoms_.size(); ++k) {
      if (!in(atoms_[k], pos + static_cast<uint32_t>(k))) return 0;
    }
    return static_cast<uint32_t>(atoms_.size());
  }
  const CharSet& atom = atoms_[0];
  auto run_end = [&](uint32_t i) {
    while (in(atom, i)) ++i;
    return i;
  };
  // Greedy: the optional prefix first; backtracking into the run cannot reach `$` from
  // a shorter run (the next code point is in the class, not the end).
  if (has_prefix_ && in(prefix_, pos) && in(atom, pos + 1)) {
    const uint32_t q = run_end(pos + 1);
    if (!anchor_end_ || q == end) return q - pos;
  }
  if (in(atom, pos)) {
    const uint32_t q = run_end(pos);
    if (!anchor_end_ || q == end) return q - pos;
    *resume = q;  // every start inside this run ends where it does: none reaches `$`
  }
  return 0;
}

void PatternPass::Split(const PreTokenizeScratch& s, uint32_t begin, uint32_t end,
                        std::vector<uint32_t>* ends) const {
  uint32_t done = begin;  // end of the last piece emitted
  uint32_t pos = begin;
  while (pos < end) {
    uint32_t resume;
    const uint32_t n = MatchAt(s, pos, end, &resume);
    if (n == 0) {
      pos = resume;
      continue;
    }
    if (pos > done) ends->push_back(pos);  // the unmatched gap before the match
    pos += n;
    ends->push_back(pos);
    done = pos;
  }
  if (done < end) ends->push_back(end);
}

}  // namespace weft::tokenizer_internal

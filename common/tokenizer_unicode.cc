#include "common/tokenizer_unicode.h"

#include <algorithm>
#include <array>

namespace weft::tokenizer_internal {
namespace {

constexpr uint32_t kTableSize = 0x10000;  // direct lookup for the BMP

struct BmpTable {
  std::array<uint8_t, kTableSize> flags;
  BmpTable() {
    for (int i = 0; i < kNumCodepointRanges; ++i) {
      const uint32_t first = kCodepointRanges[i].first;
      if (first >= kTableSize) break;
      const uint32_t end = i + 1 < kNumCodepointRanges
                               ? std::min(kCodepointRanges[i + 1].first, kTableSize)
                               : kTableSize;
      std::fill(flags.begin() + first, flags.begin() + end, kCodepointRanges[i].flags);
    }
  }
};

const BmpTable& Bmp() {
  static const BmpTable* const table = new BmpTable();
  return *table;
}

struct ByteTables {
  std::array<uint32_t, 256> byte_to_cp;
  std::array<int16_t, 512> cp_to_byte;  // every mapped code point is < 0x144
  ByteTables() {
    cp_to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) ||
                             (b >= 0xAE && b <= 0xFF);
      byte_to_cp[b] = printable ? b : 256 + n++;
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteTables& Bytes() {
  static const ByteTables* const tables = new ByteTables();
  return *tables;
}

inline bool IsCont(unsigned char c) { return (c & 0xC0) == 0x80; }

}  // namespace

CodepointFlags FlagsOf(uint32_t cp) {
  if (cp < kTableSize) return CodepointFlags{Bmp().flags[cp]};
  if (cp > kMaxCodepoint) return CodepointFlags{static_cast<uint8_t>(Category::kUndefined)};
  const CodepointRange* end = kCodepointRanges + kNumCodepointRanges;
  const CodepointRange* it = std::upper_bound(
      kCodepointRanges, end, cp,
      [](uint32_t v, const CodepointRange& r) { return v < r.first; });
  return CodepointFlags{(it - 1)->flags};
}

CodepointClass ClassOf(uint32_t cp) {
  static const std::array<CodepointClass, 256>* const kByFlags = [] {
    auto* t = new std::array<CodepointClass, 256>();
    for (int b = 0; b < 256; ++b) {
      const CodepointFlags f{static_cast<uint8_t>(b)};
      (*t)[b] = f.whitespace() ? CodepointClass::kWhitespace
                : f.letter()   ? CodepointClass::kLetter
                : f.number()   ? CodepointClass::kNumber
                               : CodepointClass::kOther;
    }
    return t;
  }();
  return (*kByFlags)[FlagsOf(cp).bits];
}


uint32_t DecodeCodepoint(absl::string_view s, size_t* pos) {
  const size_t i = *pos;
  const size_t n = s.size();
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c0 = b(0);
  if (c0 < 0x80) {
    *pos = i + 1;
    return c0;
  }
  // Mirrors unicode_cpt_from_utf8: only the lead byte's pattern and the continuation
  // bytes' top bits are checked.
  if ((c0 & 0x40) == 0) {
    *pos = i + 1;
    return kReplacementChar;
  }
  if ((c0 & 0x20) == 0) {
    if (i + 1 < n && IsCont(b(1))) {
      *pos = i + 2;
      return ((c0 & 0x1Fu) << 6) | (b(1) & 0x3Fu);
    }
  } else if ((c0 & 0x10) == 0) {
    if (i + 2 < n && IsCont(b(1)) && IsCont(b(2))) {
      *pos = i + 3;
      return ((c0 & 0x0Fu) << 12) | ((b(1) & 0x3Fu) << 6) | (b(2) & 0x3Fu);
    }
  } else if ((c0 & 0x08) == 0) {
    if (i + 3 < n && IsCont(b(1)) && IsCont(b(2)) && IsCont(b(3))) {
      *pos = i + 4;
      const uint32_t cp = ((c0 & 0x07u) << 18) | ((b(1) & 0x3Fu) << 12) |
                          ((b(2) & 0x3Fu) << 6) | (b(3) & 0x3Fu);
      // llama.cpp throws from unicode_cpt_to_utf8 (and aborts) on these.
      return cp > kMaxCodepoint ? kReplacementChar : cp;
    }
  }
  *pos = i + 1;
  return kReplacementChar;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp <= 0x7F) {
    out->push_back(static_cast<char>(cp));
  } else if (cp <= 0x7FF) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp <= 0xFFFF) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Bytes AppendUtf8 writes for `cp`.
size_t Utf8Length(uint32_t cp) {
  return cp <= 0x7F ? 1 : cp <= 0x7FF ? 2 : cp <= 0xFFFF ? 3 : 4;
}

}  // namespace

bool IsCanonicalForTokenizer(absl::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (static_cast<unsigned char>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t start = pos;
    const uint32_t cp = DecodeCodepoint(s, &pos);
    // Invalid bytes (one byte -> U+FFFD), values above U+10FFFF (four bytes -> U+FFFD)
    // and overlong forms all re-encode to a different length; a decoded sequence that
    // keeps its length re-encodes to the same bytes.
    if (Utf8Length(cp) != pos - start) return false;
  }
  return true;
}

std::string CanonicalizeForTokenizer(absl::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  size_t pos = 0;
  while (pos < s.size()) AppendUtf8(DecodeCodepoint(s, &pos), &out);
  return out;
}

uint32_t ByteToUnicode(uint8_t byte) { return Bytes().byte_to_cp[byte]; }

int UnicodeToByte(uint32_t cp) {
  return cp < Bytes().cp_to_byte.size() ? Bytes().cp_to_byte[cp] : -1;
}

void AppendByteEncoded(absl::string_view bytes, std::string* out) {
  const ByteTables& t = Bytes();
  for (char c : bytes) AppendUtf8(t.byte_to_cp[static_cast<unsigned char>(c)], out);
}

}  // namespace weft::tokenizer_internal

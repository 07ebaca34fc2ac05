#include "scheduler/stop_checker.h"

#include <algorithm>

#include "glog/logging.h"

namespace weft {
namespace {

constexpr absl::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Classifies the character starting at p[0] (n ≥ 1 bytes available):
//   > 0: a valid character of that many bytes;
//   = 0: a valid but incomplete prefix that runs to the end of the input;
//   < 0: invalid; -k is the length of the maximal invalid subpart to replace.
int ClassifyChar(const unsigned char* p, size_t n) {
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return 1;
  int need;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 == 0xE0) {
    need = 2;
    lo = 0xA0;
  } else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) {
    need = 2;
  } else if (b0 == 0xED) {
    need = 2;
    hi = 0x9F;  // no surrogates
  } else if (b0 == 0xF0) {
    need = 3;
    lo = 0x90;
  } else if (b0 >= 0xF1 && b0 <= 0xF3) {
    need = 3;
  } else if (b0 == 0xF4) {
    need = 3;
    hi = 0x8F;  // ≤ U+10FFFF
  } else {
    return -1;  // continuation byte, overlong lead (C0, C1) or F5..FF
  }
  for (int k = 1; k <= need; ++k) {
    if (static_cast<size_t>(k) >= n) return 0;
    const unsigned char c = p[k];
    const unsigned char l = k == 1 ? lo : 0x80;
    const unsigned char h = k == 1 ? hi : 0xBF;
    if (c < l || c > h) return -k;
  }
  return need + 1;
}

// Decodes `bytes` into valid UTF-8 appended to `out`; an incomplete character at the end
// goes to `*tail` (which must be empty).
void DecodeComplete(absl::string_view bytes, std::string* out, std::string* tail) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {  // ASCII run
      size_t j = i + 1;
      while (j < n && p[j] < 0x80) ++j;
      out->append(bytes.data() + i, j - i);
      i = j;
      continue;
    }
    const int r = ClassifyChar(p + i, n - i);
    if (r > 0) {
      out->append(bytes.data() + i, r);
      i += r;
    } else if (r == 0) {
      tail->assign(bytes.data() + i, n - i);
      break;
    } else {
      out->append(kReplacement.data(), kReplacement.size());
      i += -r;
    }
  }
}

}  // namespace

bool IsValidUtf8(absl::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    const int r = ClassifyChar(p + i, s.size() - i);
    if (r <= 0) return false;
    i += r;
  }
  return true;
}

StopChecker::StopChecker(const std::vector<std::string>* stop_strings)
    : stop_strings_(stop_strings != nullptr && !stop_strings->empty() ? stop_strings
                                                                       : nullptr) {}

void StopChecker::Decode(absl::string_view bytes, std::string* out) {
  if (utf8_tail_.empty()) {
    // Most tokens are ASCII: one append, no per-character work.
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    size_t i = 0;
    while (i < bytes.size() && p[i] < 0x80) ++i;
    if (i == bytes.size()) {
      out->append(bytes.data(), bytes.size());
    } else {
      DecodeComplete(bytes, out, &utf8_tail_);
    }
    return;
  }
  std::string joined = utf8_tail_;
  joined.append(bytes.data(), bytes.size());
  utf8_tail_.clear();
  DecodeComplete(joined, out, &utf8_tail_);
}

size_t StopChecker::HoldbackLength() const {
  size_t best = 0;
  for (const std::string& s : *stop_strings_) {
    for (size_t k = std::min(s.size() - 1, held_.size()); k > best; --k) {
      if (absl::string_view(held_).substr(held_.size() - k) == absl::string_view(s).substr(0, k)) {
        best = k;
        break;
      }
    }
  }
  return best;
}

bool StopChecker::Append(absl::string_view bytes, std::string* delta) {
  if (stop_strings_ == nullptr) {
    Decode(bytes, delta);
    return false;
  }
  Decode(bytes, &held_);
  size_t match = std::string::npos;
  for (const std::string& s : *stop_strings_) {
    match = std::min(match, held_.find(s));
  }
  if (match != std::string::npos) {
    delta->append(held_, 0, match);
    held_.clear();
    utf8_tail_.clear();
    return true;
  }
  // Whatever cannot start a stop string is safe to stream: a stop string starts with a
  // lead byte, so the cut falls on a character boundary.
  const size_t emit = held_.size() - HoldbackLength();
  delta->append(held_, 0, emit);
  held_.erase(0, emit);
  return false;
}

void StopChecker::Flush(std::string* delta) {
  delta->append(held_);
  held_.clear();
  if (!utf8_tail_.empty()) {
    delta->append(kReplacement.data(), kReplacement.size());
    utf8_tail_.clear();
  }
}

}  // namespace weft

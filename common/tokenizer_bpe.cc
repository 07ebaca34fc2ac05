#include "common/tokenizer_bpe.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/tokenizer_unicode.h"

namespace weft::tokenizer_internal {
namespace {

// Bytes of the UTF-8 character whose lead byte is `c` (llama.cpp's unicode_len_utf8).
uint32_t LeadLength(unsigned char c) {
  static constexpr uint8_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[c >> 4];
}

// Min-heap order on (rank, left): the lowest rank first, then the leftmost pair.
struct CandidateAfter {
  bool operator()(const BpeScratch::Candidate& a, const BpeScratch::Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

absl::StatusOr<BpeModel> BpeModel::Build(
    const std::vector<std::string>& tokens,
    const absl::flat_hash_map<std::string, int32_t>& token_to_id,
    const std::vector<std::string>& merges, bool byte_level) {
  BpeModel model;
  model.byte_level_ = byte_level;
  model.vocab_size_ = static_cast<int32_t>(tokens.size());
  absl::flat_hash_map<std::string, int32_t> extra;  // text -> extra symbol id
  std::vector<std::string> extra_text;
  auto symbol_of = [&](const std::string& text) -> int32_t {
    if (auto it = token_to_id.find(text); it != token_to_id.end()) return it->second;
    auto [it, inserted] =
        extra.emplace(text, model.vocab_size_ + static_cast<int32_t>(extra_text.size()));
    if (inserted) extra_text.push_back(text);
    return it->second;
  };
  for (int b = 0; b < 256; ++b) {
    if (byte_level) {
      std::string text;
      AppendUtf8(ByteToUnicode(static_cast<uint8_t>(b)), &text);
      model.byte_symbol_[b] = symbol_of(text);
      model.byte_token_[b] = -1;
    } else {
      model.byte_symbol_[b] = kNoSymbol;
      auto it = token_to_id.find(absl::StrFormat("<0x%02X>", b));
      model.byte_token_[b] = it == token_to_id.end() ? -1 : it->second;
    }
  }
  model.merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos || space + 1 == m.size()) continue;
    const std::string left = m.substr(0, space);
    const std::string right = m.substr(space + 1);
    const int32_t l = symbol_of(left);
    const int32_t r = symbol_of(right);
    const int32_t result = symbol_of(absl::StrCat(left, right));
    model.merges_.emplace(Key(l, r), Merge{static_cast<int32_t>(i), result});
    if (extra_text.size() > (1u << 30)) {
      return absl::InvalidArgumentError("tokenizer.ggml.merges: too many symbols");
    }
  }
  // llama.cpp's fallback for a final symbol that is not a token, byte-level: the tokens
  // whose text is one byte of the symbol's (byte-encoded) text. (UTF-8: its byte tokens,
  // looked up when emitted.)
  model.extra_fallback_.resize(extra_text.size());
  for (size_t i = 0; i < extra_text.size() && byte_level; ++i) {
    for (char c : extra_text[i]) {
      if (auto it = token_to_id.find(std::string(1, c)); it != token_to_id.end()) {
        model.extra_fallback_[i].push_back(it->second);
      }
    }
  }
  if (!byte_level) {
    // Initial symbols of UTF-8 characters: the tokens and merge-only texts that are one
    // character long.
    auto one_char = [](absl::string_view t) {
      return !t.empty() && LeadLength(static_cast<unsigned char>(t[0])) == t.size();
    };
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (one_char(tokens[i])) model.char_symbol_.emplace(tokens[i], static_cast<int32_t>(i));
    }
    for (size_t i = 0; i < extra_text.size(); ++i) {
      if (one_char(extra_text[i])) {
        model.char_symbol_.emplace(extra_text[i], model.vocab_size_ + static_cast<int32_t>(i));
      }
    }
  }
  return model;
}

int32_t BpeModel::CharSymbol(absl::string_view ch) const {
  auto it = char_symbol_.find(ch);
  return it == char_symbol_.end() ? kNoSymbol : it->second;
}

void BpeModel::Emit(int32_t symbol, absl::string_view bytes, std::vector<int32_t>* out) const {
  if (symbol >= 0 && symbol < vocab_size_) {
    out->push_back(symbol);
    return;
  }
  if (byte_level_) {
    const std::vector<int32_t>& fallback = extra_fallback_[symbol - vocab_size_];
    out->insert(out->end(), fallback.begin(), fallback.end());
    return;
  }
  for (char c : bytes) {
    const int32_t id = byte_token_[static_cast<unsigned char>(c)];
    if (id >= 0) out->push_back(id);
  }
}

void BpeModel::PushCandidate(const BpeScratch::Symbol* syms, int32_t left,
                             BpeScratch* scratch) const {
  if (left < 0) return;
  const int32_t right = syms[left].next;
  if (right < 0) return;
  const Merge* m = FindMerge(syms[left].id, syms[right].id);
  if (m == nullptr) return;
  scratch->heap.push_back({m->rank, left, syms[left].len + syms[right].len, m->result});
  std::push_heap(scratch->heap.begin(), scratch->heap.end(), CandidateAfter());
}

void BpeModel::EncodeWord(absl::string_view word, BpeScratch* scratch,
                          std::vector<int32_t>* out) const {
  if (word.empty()) return;
  std::vector<BpeScratch::Symbol>& syms = scratch->symbols;
  syms.clear();
  if (byte_level_) {
    if (word.size() == 1) {
      Emit(byte_symbol_[static_cast<unsigned char>(word[0])], word, out);
      return;
    }
    for (size_t i = 0; i < word.size(); ++i) {
      syms.push_back({byte_symbol_[static_cast<unsigned char>(word[i])], 0, 0, 1});
    }
  } else {
    for (size_t i = 0; i < word.size();) {
      const uint32_t len = std::min<uint32_t>(LeadLength(static_cast<unsigned char>(word[i])),
                                              static_cast<uint32_t>(word.size() - i));
      syms.push_back({CharSymbol(word.substr(i, len)), 0, 0, len});
      i += len;
    }
  }
  const int32_t n = static_cast<int32_t>(syms.size());
  for (int32_t i = 0; i < n; ++i) {
    syms[i].prev = i - 1;
    syms[i].next = i + 1 < n ? i + 1 : -1;
  }
  std::vector<BpeScratch::Candidate>& heap = scratch->heap;
  heap.clear();
  for (int32_t i = 0; i + 1 < n; ++i) PushCandidate(syms.data(), i, scratch);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), CandidateAfter());
    const BpeScratch::Candidate c = heap.back();
    heap.pop_back();
    BpeScratch::Symbol& l = syms[c.left];
    if (l.len == 0 || l.next < 0) continue;
    BpeScratch::Symbol& r = syms[l.next];
    // Lengths only grow, so an unchanged sum means both symbols are as queued.
    if (l.len + r.len != c.len) continue;
    l.id = c.result;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (l.next >= 0) syms[l.next].prev = c.left;
    PushCandidate(syms.data(), l.prev, scratch);
    PushCandidate(syms.data(), c.left, scratch);
  }
  uint32_t offset = 0;
  for (int32_t i = 0; i >= 0; i = syms[i].next) {
    Emit(syms[i].id, word.substr(offset, syms[i].len), out);
    offset += syms[i].len;
  }
}

}  // namespace weft::tokenizer_internal

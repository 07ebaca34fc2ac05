#include "common/tokenizer_spm.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace weft::tokenizer_internal {
namespace {

// llama.cpp's unicode_len_utf8: the length a lead byte announces (continuation and
// invalid bytes count as one; F8-FF as four).
uint32_t LeadLength(unsigned char c) {
  static constexpr uint8_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[c >> 4];
}

// Max-heap order: the highest score first, then the leftmost pair.
struct BigramBefore {
  bool operator()(const SpmScratch::Bigram& a, const SpmScratch::Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

void FillSpmByteTokens(const absl::flat_hash_map<std::string, int32_t>& token_to_id,
                       int32_t unk_id, SpmVocab* vocab) {
  for (int b = 0; b < 256; ++b) {
    int32_t id = unk_id;
    if (auto it = token_to_id.find(absl::StrFormat("<0x%02X>", b)); it != token_to_id.end()) {
      id = it->second;
    } else if (auto one = token_to_id.find(std::string(1, static_cast<char>(b)));
               one != token_to_id.end()) {
      id = one->second;
    }
    vocab->byte_tokens[b] = id;
  }
}

void SpmEncode(absl::string_view text, const SpmVocab& vocab, SpmScratch* scratch,
               std::vector<int32_t>* out) {
  if (text.empty()) return;
  const auto& token_to_id = *vocab.token_to_id;
  const auto& scores = *vocab.scores;
  std::vector<SpmScratch::Symbol>& syms = scratch->symbols;
  std::vector<SpmScratch::Bigram>& heap = scratch->heap;
  syms.clear();
  heap.clear();
  const uint32_t n = static_cast<uint32_t>(text.size());
  for (uint32_t offs = 0; offs < n;) {
    const uint32_t len = std::min(LeadLength(static_cast<unsigned char>(text[offs])), n - offs);
    const int32_t index = static_cast<int32_t>(syms.size());
    syms.push_back({offs, len, index - 1, offs + len == n ? -1 : index + 1});
    offs += len;
  }
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t len = syms[left].len + syms[right].len;
    auto it = token_to_id.find(text.substr(syms[left].start, len));
    if (it == token_to_id.end()) return;
    heap.push_back({scores[it->second], left, right, len});
    std::push_heap(heap.begin(), heap.end(), BigramBefore());
  };
  for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) try_add(i - 1, i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), BigramBefore());
    const SpmScratch::Bigram b = heap.back();
    heap.pop_back();
    SpmScratch::Symbol& l = syms[b.left];
    SpmScratch::Symbol& r = syms[b.right];
    // Lengths only grow, so unchanged non-zero lengths mean both are as queued.
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) {
    const absl::string_view piece = text.substr(syms[i].start, syms[i].len);
    if (auto it = token_to_id.find(piece); it != token_to_id.end()) {
      out->push_back(it->second);
      continue;
    }
    for (char c : piece) {
      const int32_t id = vocab.byte_tokens[static_cast<unsigned char>(c)];
      if (id >= 0) out->push_back(id);
    }
  }
}

}  // namespace weft::tokenizer_internal

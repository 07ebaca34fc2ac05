// BpeModel: the merge step of BPE by merge ranks, as llama.cpp runs it
// (llm_tokenizer_bpe_session::tokenize), over integer symbol ids instead of strings.
//
// Byte-level vocabularies (GPT-2 style): a word's bytes start as one symbol each (the
// vocabulary entry of the byte's GPT-2 unicode character). UTF-8 vocabularies
// (SentencePiece-style BPE, Gemma 4): one symbol per UTF-8 character. Repeatedly, the
// adjacent pair with the lowest merge rank is merged (ties: the leftmost pair), until no
// adjacent pair has a rank. Each final symbol is emitted as its token id; a symbol whose
// text is not in the vocabulary is emitted as llama.cpp's fallback: byte-level, the
// tokens of its single bytes that are tokens (usually none); UTF-8, the "<0xHH>" byte
// tokens of its bytes.
//
// Symbols are token ids where the text is a vocabulary entry and extra ids >=
// vocab_size for texts that occur only in merges, so a merge is one hash lookup of a
// pair of ints: (left << 32 | right) -> {rank, merged symbol}.
//
// Ownership: owns its tables. Thread-safety: immutable after Build; EncodeWord is const
// and uses only the caller's scratch, so one model serves any number of threads.
#ifndef WEFT_COMMON_TOKENIZER_BPE_H_
#define WEFT_COMMON_TOKENIZER_BPE_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace weft::tokenizer_internal {

// Per-call working memory for EncodeWord.
struct BpeScratch {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t len;  // bytes of the word it covers; 0 once merged into its left neighbour
  };
  struct Candidate {
    int32_t rank;
    int32_t left;    // index of the left symbol
    uint32_t len;    // left.len + right.len when queued; stale once that changes
    int32_t result;  // symbol id of the merged pair
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

class BpeModel {
 public:
  // `tokens`: the vocabulary (tokenizer.ggml.tokens; GPT-2 byte-encoded when
  // `byte_level`); `token_to_id`: its inverse; `merges`: "left right" strings, rank =
  // index (tokenizer.ggml.merges). A merge without a space (after its first byte) is
  // ignored, as is a repeated pair (the first rank wins), as in llama.cpp.
  static absl::StatusOr<BpeModel> Build(
      const std::vector<std::string>& tokens,
      const absl::flat_hash_map<std::string, int32_t>& token_to_id,
      const std::vector<std::string>& merges, bool byte_level);

  // Appends the token ids of `word` (one pre-tokenizer word: raw bytes when byte-level,
  // else well-formed UTF-8).
  void EncodeWord(absl::string_view word, BpeScratch* scratch, std::vector<int32_t>* out) const;

  size_t num_merges() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // symbol id of left+right
  };

  static uint64_t Key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  const Merge* FindMerge(int32_t left, int32_t right) const {
    auto it = merges_.find(Key(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  }
  // Appends `symbol`'s tokens; `bytes` is the word's text it covers.
  void Emit(int32_t symbol, absl::string_view bytes, std::vector<int32_t>* out) const;
  // The initial symbol of the UTF-8 character `ch` (kNoSymbol when it is unknown).
  int32_t CharSymbol(absl::string_view ch) const;
  void PushCandidate(const BpeScratch::Symbol* syms, int32_t left, BpeScratch* scratch) const;

  static constexpr int32_t kNoSymbol = -1;

  bool byte_level_ = true;
  int32_t vocab_size_ = 0;
  std::array<int32_t, 256> byte_symbol_{};  // byte-level: the symbol of each byte
  // UTF-8: "<0xHH>" token of each byte (or -1), and the symbols of single characters.
  std::array<int32_t, 256> byte_token_{};
  absl::flat_hash_map<std::string, int32_t> char_symbol_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  // For extra symbols (id - vocab_size_): the tokens llama.cpp falls back to.
  std::vector<std::vector<int32_t>> extra_fallback_;
};

}  // namespace weft::tokenizer_internal

#endif  // WEFT_COMMON_TOKENIZER_BPE_H_

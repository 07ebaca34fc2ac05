// SpmEncode: SentencePiece-style BPE by token scores, as llama.cpp runs it for
// `tokenizer.ggml.model = llama` vocabularies (llm_tokenizer_spm_session).
//
// The text (already escaped: spaces are U+2581 "▁", and a leading one added when the
// vocabulary asks) starts as one symbol per UTF-8 character, the length taken from the
// lead byte alone (llama.cpp's unicode_len_utf8: no validation, so invalid bytes form
// odd symbols that end up as byte tokens). Repeatedly, the adjacent pair whose
// concatenation is a token with the highest score is merged (ties: the leftmost), until
// no adjacent pair forms a token. Each final symbol is emitted as its token, or, when it
// is not one, as one byte token per byte ("<0xHH>", else the one-byte token, else UNK:
// llama.cpp throws there).
//
// Thread-safety: stateless; the vocabulary view is read-only and the scratch is the
// caller's.
#ifndef WEFT_COMMON_TOKENIZER_SPM_H_
#define WEFT_COMMON_TOKENIZER_SPM_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace weft::tokenizer_internal {

// What the encoder reads; the Tokenizer owns the data.
struct SpmVocab {
  const absl::flat_hash_map<std::string, int32_t>* token_to_id = nullptr;
  const std::vector<float>* scores = nullptr;
  std::array<int32_t, 256> byte_tokens{};  // byte -> token, -1 when there is none
};

// Fills byte_tokens for `token_to_id`: "<0xHH>" first, else the one-byte text, else
// `unk_id` (may be -1: the byte is dropped).
void FillSpmByteTokens(const absl::flat_hash_map<std::string, int32_t>& token_to_id,
                       int32_t unk_id, SpmVocab* vocab);

// Per-call working memory.
struct SpmScratch {
  struct Symbol {
    uint32_t start;
    uint32_t len;  // 0 once merged into its left neighbour
    int32_t prev;
    int32_t next;
  };
  struct Bigram {
    float score;
    int32_t left;
    int32_t right;
    uint32_t len;  // bytes of the pair when queued
  };
  std::vector<Symbol> symbols;
  std::vector<Bigram> heap;
};

// Appends the tokens of `text` (one fragment, escaped as above) to `out`.
void SpmEncode(absl::string_view text, const SpmVocab& vocab, SpmScratch* scratch,
               std::vector<int32_t>* out);

}  // namespace weft::tokenizer_internal

#endif  // WEFT_COMMON_TOKENIZER_SPM_H_

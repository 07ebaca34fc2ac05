// Tokenizer: text <-> token ids from a GGUF file's own vocabulary, giving the same ids
// as llama.cpp (build 0c1e570) for the same text.
//
// Supported (common/tokenizer_config.h has the list; anything else is UNIMPLEMENTED
// when loading, naming the model or pre-tokenizer: silently tokenizing differently from
// llama.cpp would be worse than refusing):
//   * SentencePiece (`tokenizer.ggml.model = llama`: Llama 2, Mistral, TinyLlama, Phi-3,
//     Gemma 1-3): merges by token score (tokenizer_spm.h), byte fallback to <0xHH>
//     tokens, spaces written as U+2581, a space prefix (tokenizer.ggml.add_space_prefix,
//     default true) before the first text fragment and after every special token;
//   * byte-level BPE (`gpt2`) with the pre-tokenizer `tokenizer.ggml.pre` names
//     (tokenizer_pretokenize.h): Llama 3, Qwen 2 / 3.5, SmolLM, GPT-2, StarCoder,
//     Falcon, DeepSeek LLM / Coder, Command-R, ... ; `ignore_merges` where llama.cpp has it;
//   * UTF-8 BPE over U+2581-escaped text (Gemma 4, `gemma4`).
//
// Encoding, as llama_tokenize(text, add_special, parse_special) does:
//   1. With parse_special, the texts of control / user-defined / unknown tokens found
//      in the text ("<|im_start|>") become those tokens; without it, only user-defined
//      ones do. Longer special tokens are matched first, each one across the whole text
//      before the next one (llama.cpp's tokenizer_st_partition); tokens llama.cpp marks
//      lstrip/rstrip (Phi-3's) swallow the whitespace beside them. Byte ranges given as
//      EncodeOptions::literal_spans are never parsed as special tokens (a chat
//      message's content), whatever they hold.
//   2. Every other fragment: BPE decodes it like llama.cpp (invalid UTF-8 bytes become
//      U+FFFD, overlong forms are re-encoded), pre-tokenizes it and encodes each word;
//      SentencePiece encodes the raw bytes (invalid ones become byte tokens).
//   3. BOS first / EOS last when the options (default: the GGUF's add_bos_token /
//      add_eos_token, else llama.cpp's default for the vocabulary) ask for them.
// Bytes with no token are dropped as llama.cpp drops them (byte-level BPE: a byte whose
// GPT-2 character is not in the vocabulary; SentencePiece: a byte with neither <0xHH>
// nor a one-byte token becomes UNK, where llama.cpp throws).
// Divergences: bytes that llama.cpp decodes to a code point above U+10FFFF (F4 90..,
// F5-F7 leads) make llama.cpp abort; here they become one U+FFFD (BPE). Where a GGUF
// names no EOT (or FIM) token and several tokens have the well-known texts, llama.cpp
// takes the first in its hash map's order and Weft the lowest id (e.g. Llama 3:
// llama.cpp <|eot_id|>, Weft <|end_of_text|>): eot_id() differs; the ids of texts, the
// control and EOG sets are the same on every vocabulary tested (a vocabulary with two
// FIM-looking tokens of one kind could get a different one marked control).
//
// Decoding: TokenBytes(id) is the bytes a token stands for in generated text, as
// llama_token_to_piece(special=false) gives them: control and unknown tokens contribute
// nothing, user-defined tokens their text, byte tokens their byte, SentencePiece pieces
// their text with U+2581 as a space. Decode(ids) concatenates them (it keeps the space a
// SentencePiece prefix added, as streaming pieces do; llama_detokenize strips it);
// Decode(ids, {.render_special = true}) writes control tokens' text too. Decoded bytes
// may be invalid UTF-8 (a token can hold part of a character); use
// IncrementalDetokenizer (common/detokenizer.h) for text that must be valid UTF-8.
//
// End of generation: eog_ids() is llama.cpp's set (llama_vocab_is_eog): EOS, EOT, EOM,
// the FIM pad/repo/separator tokens, and tokens with well-known end texts
// ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>", ...). For SmolLM2:
// {0, 2, 4} = <|endoftext|>, <|im_end|>, and <reponame> (llama.cpp takes it for FIM
// "repo").
//
// Ownership: owns all vocabulary data (copied out of the GgufFile, which may be closed
// afterwards). Thread-safety: immutable after FromGguf; every method is const and safe
// to call from many threads at once.
#ifndef WEFT_COMMON_TOKENIZER_H_
#define WEFT_COMMON_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/gguf.h"
#include "common/tokenizer_bpe.h"
#include "common/tokenizer_config.h"
#include "common/tokenizer_pretokenize.h"
#include "common/tokenizer_spm.h"

namespace weft {

struct EncodeOptions {
  // Prepend BOS / append EOS. Unset: as the GGUF says (tokenizer.ggml.add_bos_token /
  // add_eos_token; llama.cpp's defaults when absent). SmolLM2: neither.
  std::optional<bool> add_bos;
  std::optional<bool> add_eos;
  // Turn special-token texts written in the input ("<|im_start|>") into those tokens,
  // as llama.cpp's --prompt does. When false they are tokenized as plain text.
  bool parse_special = true;
  // Byte ranges [begin, end) of the text where no special token is recognised, even with
  // parse_special (a special token's text must lie wholly outside them). Sorted, not
  // overlapping. The view must outlive the Encode call.
  absl::Span<const std::pair<size_t, size_t>> literal_spans;
};

struct DecodeOptions {
  // Write control/unknown tokens' text (e.g. "<|im_end|>") instead of dropping them.
  bool render_special = false;
};

class Tokenizer {
 public:
  // Token attribute bits (llama.cpp's llama_token_attr for the bits we use).
  enum Attr : uint32_t {
    kAttrUndefined = 0,
    kAttrUnknown = 1 << 0,
    kAttrUnused = 1 << 1,
    kAttrNormal = 1 << 2,
    kAttrControl = 1 << 3,
    kAttrUserDefined = 1 << 4,
    kAttrByte = 1 << 5,
    kAttrLstrip = 1 << 7,  // llama.cpp's LLAMA_TOKEN_ATTR_LSTRIP / RSTRIP
    kAttrRstrip = 1 << 8,
  };

  // Loads the vocabulary, merges and special tokens. InvalidArgument for a malformed
  // vocabulary (missing keys, duplicate tokens, bad ids), Unimplemented for tokenizer
  // kinds that are not supported (see above).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& gguf);

  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  std::vector<int32_t> Encode(absl::string_view text, const EncodeOptions& options = {}) const;

  // Concatenated TokenBytes (or control tokens' text with render_special). Ids outside
  // [0, vocab_size()) contribute nothing.
  std::string Decode(absl::Span<const int32_t> ids, const DecodeOptions& options = {}) const;

  // The raw bytes `token_id` adds to generated text ("" for control, unknown, unused
  // and out-of-range ids). The view lives as long as the Tokenizer.
  absl::string_view TokenBytes(int32_t token_id) const;

  // The vocabulary entry as stored in the GGUF (GPT-2 byte-encoded, e.g. "Ġthe", or
  // SentencePiece's "▁the"; for control tokens their text, e.g. "<|im_end|>"). "" for
  // out-of-range ids.
  absl::string_view TokenText(int32_t token_id) const;

  // The id whose vocabulary entry (TokenText) is exactly `text`, or -1.
  int32_t FindToken(absl::string_view text) const;

  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  bool IsValid(int32_t token_id) const { return token_id >= 0 && token_id < vocab_size(); }
  uint32_t attr(int32_t token_id) const { return IsValid(token_id) ? attrs_[token_id] : 0; }
  bool IsControl(int32_t token_id) const { return (attr(token_id) & kAttrControl) != 0; }
  bool IsEog(int32_t token_id) const;

  // -1 when the vocabulary has none.
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t eot_id() const { return eot_id_; }
  // Sorted ascending.
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  // SentencePiece (tokenizer.ggml.model = llama).
  bool is_spm() const {
    return config_.algorithm == tokenizer_internal::TokenizerConfig::Algorithm::kSpm;
  }
  const std::string& model() const { return model_; }
  const std::string& pre() const { return config_.pre_name; }

 private:
  struct Fragment {
    int32_t token;  // >= 0: a special token; -1: raw text [begin, end)
    size_t begin;
    size_t end;
  };

  Tokenizer() = default;
  absl::Status LoadVocab(const GgufFile& gguf);
  absl::Status LoadSpecialIds(const GgufFile& gguf);
  void DetectSpecialTokens();
  void DetectEog();
  void BuildDecodeTables();
  void ApplyModelTokenAttrs(const GgufFile& gguf);
  // Splits `text` at special tokens (step 1 above).
  void PartitionSpecial(absl::string_view text, const EncodeOptions& options,
                        std::vector<Fragment>* fragments) const;
  // Tokens of one text fragment; `after_special`: it follows a special token or starts
  // the text (SentencePiece's space prefix).
  void EncodeText(absl::string_view text, bool after_special, std::vector<int32_t>* out) const;
  void EncodeBpe(absl::string_view text, std::vector<int32_t>* out) const;

  tokenizer_internal::TokenizerConfig config_;
  std::string model_;
  std::vector<std::string> tokens_;
  std::vector<uint32_t> attrs_;
  std::vector<float> scores_;  // SentencePiece
  absl::flat_hash_map<std::string, int32_t> token_to_id_;
  std::optional<tokenizer_internal::PreTokenizer> pre_tokenizer_;
  tokenizer_internal::BpeModel bpe_;
  tokenizer_internal::SpmVocab spm_;
  // Decoded bytes of every token (special=false rendering), back to back.
  std::string piece_bytes_;
  std::vector<uint32_t> piece_offsets_;  // vocab_size + 1 entries
  // Special tokens considered by PartitionSpecial, longest text first.
  std::vector<int32_t> special_tokens_;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t eot_id_ = -1;
  int32_t eom_id_ = -1;
  int32_t unk_id_ = -1;
  int32_t fim_pre_id_ = -1;
  int32_t fim_suf_id_ = -1;
  int32_t fim_mid_id_ = -1;
  int32_t fim_pad_id_ = -1;
  int32_t fim_rep_id_ = -1;
  int32_t fim_sep_id_ = -1;
  std::vector<int32_t> eog_ids_;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_space_prefix_ = false;
};

}  // namespace weft

#endif  // WEFT_COMMON_TOKENIZER_H_

// Pre-tokenizers: split text into the words that BPE then encodes one by one, exactly
// as llama.cpp (build 0c1e570) does for each `tokenizer.ggml.pre` Weft supports.
//
// llama.cpp describes a pre-tokenizer as a list of regexes applied in turn, each one
// inside the pieces the previous ones left (unicode_regex_split): text the regex does
// not match stays a piece of its own. Some regexes run as hand-written matchers there
// (GPT-2's, Llama 3's, Qwen 2's and 3.5's, newline runs); the others run through
// std::regex over a "collapsed" text. Weft implements each pass as a matcher:
//
//   Gpt2      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   Llama3    (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//             ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+   (Qwen2: \p{N} alone;
//             Qwen3.5: letters runs also take \p{M}, and the punctuation run excludes it)
//   Newlines  [^\n]+|[\n]+
//   Pattern   one of the std::regex passes (tokenizer_regex_split.h)
//
// The custom matchers reproduce llama.cpp's quirks, e.g. the look-ahead in \s+(?!\S)
// only sees the current piece, and contractions are matched in lower case only by Gpt2.
// Categories come from llama.cpp's tables (tokenizer_unicode.h), not from RE2 or ICU.
//
// Thread-safety: a PreTokenizer is immutable and shared; the scratch belongs to the
// caller (one per thread).
#ifndef WEFT_COMMON_TOKENIZER_PRETOKENIZE_H_
#define WEFT_COMMON_TOKENIZER_PRETOKENIZE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/tokenizer_unicode.h"

namespace weft::tokenizer_internal {

// Reusable per-call memory for PreTokenizer::Split (keeps allocations out of the loop).
struct PreTokenizeScratch {
  std::vector<uint32_t> cps;
  std::vector<CodepointFlags> flags;  // empty for kGpt2 and kDigitsGpt2 (they read cls)
  std::vector<CodepointClass> cls;
  std::vector<uint32_t> offsets;  // byte offset of code point i; offsets[n] = size
  std::vector<uint32_t> ends;     // code point index where each piece ends
  std::vector<uint32_t> next_ends;
};

// One regex of a pre-tokenizer: appends to `ends` the (increasing) code point indices
// where the pieces of [begin, end) end; the last one is `end`.
class SplitPass {
 public:
  virtual ~SplitPass() = default;
  virtual void Split(const PreTokenizeScratch& s, uint32_t begin, uint32_t end,
                     std::vector<uint32_t>* ends) const = 0;
};

// The pre-tokenizers, named after llama.cpp's LLAMA_VOCAB_PRE_TYPE_* whose regexes they
// reproduce (the GGUF names that map to each are in tokenizer_config.cc).
enum class PreTokenizerKind {
  kWhole,          // no split (SentencePiece)
  kGpt2,           // GPT2, MPT, OLMO, JAIS, TRILLION, GRANITE_DOCLING
  kDigitsGpt2,     // \p{N} then GPT2: STARCODER, REFACT, COMMAND_R, SMOLLM, CODESHELL, ...
  kLlama3,         // LLAMA3, DBRX, SMAUG, CHATGLM4
  kQwen2,          // QWEN2, STABLELM2, HUNYUAN, SOLAR_OPEN, GROK_2
  kQwen35,         // QWEN35
  kDeepseekLlm,    // DEEPSEEK_LLM
  kDeepseekCoder,  // DEEPSEEK_CODER
  kFalcon,         // FALCON
  kDefault,        // DEFAULT (a gpt2 vocabulary without a known pre-tokenizer)
  kNewlines,       // GEMMA4, SARVAM_MOE (SentencePiece-style BPE)
};

class PreTokenizer {
 public:
  explicit PreTokenizer(PreTokenizerKind kind);

  // Appends the words of `text` to `words`, in order; they are views into `text` and
  // concatenate back to it. `text` must satisfy IsCanonicalForTokenizer (callers pass
  // CanonicalizeForTokenizer's output otherwise).
  void Split(absl::string_view text, PreTokenizeScratch* scratch,
             std::vector<absl::string_view>* words) const;

  PreTokenizerKind kind() const { return kind_; }

 private:
  PreTokenizerKind kind_;
  std::vector<std::shared_ptr<const SplitPass>> passes_;
};

}  // namespace weft::tokenizer_internal

#endif  // WEFT_COMMON_TOKENIZER_PRETOKENIZE_H_

// TokenizerConfig: how llama.cpp (build 0c1e570) tokenizes a vocabulary, decided from
// the GGUF's `tokenizer.ggml.model` and `tokenizer.ggml.pre` the way llama_vocab::load
// decides it: the algorithm, the pre-tokenizer, and the per-name flags and defaults.
//
// Supported (everything else is UNIMPLEMENTED, naming the model or pre-tokenizer):
//   model "llama"   SentencePiece (pre ignored, as in llama.cpp)
//   model "gpt2"    byte-level BPE with pre
//     default, llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2
//     jina-v5-nano, dbrx smaug-bpe, chatglm-bpe glm4 glm5, deepseek-llm, deepseek-coder,
//     falcon, mpt, starcoder, refact, command-r, smollm, codeshell, exaone, minerva-7b,
//     mellum2, gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum
//     modern-bert exaone4, olmo, jais, trillion, granite-docling, qwen2 deepseek-r1-qwen
//     kormo f2llmv2 stablelm2 hunyuan solar-open megrez grok-2, qwen35,
//     gemma4 granite-embed-multi-311m sarvam-moe (UTF-8 BPE over "▁"-escaped text)
//   model "gemma4"  as pre "gemma4"
// Refused: WordPiece (bert), Unigram (t5), RWKV, PLaMo-2 and the other models; the
// pre-tokenizers whose regexes llama.cpp runs in shapes Weft does not reproduce (tekken,
// gpt-4o, llama4, kimi-k2, deepseek-v3, poro-chat, bloom, viking, chameleon, superbpe,
// afmoe, tiny_aya, bailingmoe, seed-coder, youtu, spark2_5, jais-2, exaone-moe, laguna,
// minicpm5, ...), and BPE vocabularies that need a separator token (jina-v1-en, ...).
//
// Thread-safety: value type.
#ifndef WEFT_COMMON_TOKENIZER_CONFIG_H_
#define WEFT_COMMON_TOKENIZER_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer_pretokenize.h"

namespace weft::tokenizer_internal {

struct TokenizerConfig {
  enum class Algorithm { kBpe, kSpm };
  Algorithm algorithm = Algorithm::kBpe;
  PreTokenizerKind pre = PreTokenizerKind::kDefault;
  std::string pre_name;  // as resolved ("default" for SentencePiece)
  // BPE over GPT-2 byte-encoded text (false: over UTF-8, with "<0xHH>" byte fallback).
  bool byte_level = true;
  // Spaces become U+2581 before tokenizing (SentencePiece, Gemma 4-style BPE).
  bool escape_whitespaces = false;
  // SentencePiece: a space before the first text fragment and after special tokens
  // (overridden by tokenizer.ggml.add_space_prefix).
  bool add_space_prefix = false;
  // A word that is a token as a whole is that token, without merges (Llama 3, ...).
  bool ignore_merges = false;
  // Gemma 4: a word of only newlines that is a token is that token.
  bool newline_words_whole = false;
  // Defaults when the GGUF has no add_bos_token / add_eos_token.
  bool add_bos = false;
  bool add_eos = false;
  // Gemma 4: add_bos is true whatever the GGUF says.
  bool force_add_bos = false;
  // Special-token defaults (overridden by the GGUF's ids; -1 = none).
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
};

// The configuration for `model` and `pre` (pre "" when the GGUF has no
// tokenizer.ggml.pre, which llama.cpp treats as "default").
absl::StatusOr<TokenizerConfig> ResolveTokenizerConfig(absl::string_view model,
                                                       absl::string_view pre);

}  // namespace weft::tokenizer_internal

#endif  // WEFT_COMMON_TOKENIZER_CONFIG_H_

#include "common/tokenizer_config.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace weft::tokenizer_internal {
namespace {

struct PreEntry {
  const char* name;
  PreTokenizerKind kind;
  bool ignore_merges;
  bool add_bos;
};

// llama_vocab::impl::load's pre-tokenizer names, for the kinds Weft reproduces.
constexpr PreEntry kPreEntries[] = {
    {"default", PreTokenizerKind::kDefault, false, false},
    {"llama3", PreTokenizerKind::kLlama3, true, true},
    {"llama-v3", PreTokenizerKind::kLlama3, true, true},
    {"llama-bpe", PreTokenizerKind::kLlama3, true, true},
    {"falcon3", PreTokenizerKind::kLlama3, true, true},
    {"falcon-h1", PreTokenizerKind::kLlama3, true, true},
    {"pixtral", PreTokenizerKind::kLlama3, true, true},
    {"midm-2.0", PreTokenizerKind::kLlama3, true, true},
    {"lfm2", PreTokenizerKind::kLlama3, true, true},
    {"jina-v5-nano", PreTokenizerKind::kLlama3, true, true},
    {"dbrx", PreTokenizerKind::kLlama3, false, false},
    {"smaug-bpe", PreTokenizerKind::kLlama3, false, false},
    {"chatglm-bpe", PreTokenizerKind::kLlama3, false, false},
    {"glm4", PreTokenizerKind::kLlama3, true, false},
    {"glm5", PreTokenizerKind::kLlama3, true, false},
    {"deepseek-llm", PreTokenizerKind::kDeepseekLlm, false, false},
    {"deepseek-coder", PreTokenizerKind::kDeepseekCoder, false, false},
    {"falcon", PreTokenizerKind::kFalcon, false, false},
    {"mpt", PreTokenizerKind::kGpt2, false, false},
    {"olmo", PreTokenizerKind::kGpt2, false, false},
    {"jais", PreTokenizerKind::kGpt2, false, false},
    {"trillion", PreTokenizerKind::kGpt2, false, false},
    {"granite-docling", PreTokenizerKind::kGpt2, false, false},
    {"gpt-2", PreTokenizerKind::kGpt2, false, false},
    {"phi-2", PreTokenizerKind::kGpt2, false, false},
    {"jina-es", PreTokenizerKind::kGpt2, false, false},
    {"jina-de", PreTokenizerKind::kGpt2, false, false},
    {"gigachat", PreTokenizerKind::kGpt2, false, false},
    {"jina-v2-es", PreTokenizerKind::kGpt2, false, false},
    {"jina-v2-de", PreTokenizerKind::kGpt2, false, false},
    {"a.x-4.0", PreTokenizerKind::kGpt2, false, false},
    {"mellum", PreTokenizerKind::kGpt2, false, false},
    {"modern-bert", PreTokenizerKind::kGpt2, false, false},
    {"exaone4", PreTokenizerKind::kGpt2, false, false},
    {"starcoder", PreTokenizerKind::kDigitsGpt2, false, false},
    {"refact", PreTokenizerKind::kDigitsGpt2, false, false},
    {"command-r", PreTokenizerKind::kDigitsGpt2, false, false},
    {"smollm", PreTokenizerKind::kDigitsGpt2, false, false},
    {"codeshell", PreTokenizerKind::kDigitsGpt2, false, false},
    {"exaone", PreTokenizerKind::kDigitsGpt2, false, false},
    {"minerva-7b", PreTokenizerKind::kDigitsGpt2, false, false},
    {"mellum2", PreTokenizerKind::kDigitsGpt2, false, false},
    {"qwen2", PreTokenizerKind::kQwen2, false, false},
    {"deepseek-r1-qwen", PreTokenizerKind::kQwen2, false, false},
    {"kormo", PreTokenizerKind::kQwen2, false, false},
    {"f2llmv2", PreTokenizerKind::kQwen2, false, false},
    {"stablelm2", PreTokenizerKind::kQwen2, false, false},
    {"hunyuan", PreTokenizerKind::kQwen2, false, false},
    {"solar-open", PreTokenizerKind::kQwen2, false, false},
    {"megrez", PreTokenizerKind::kQwen2, false, false},
    {"grok-2", PreTokenizerKind::kQwen2, false, false},
    {"qwen35", PreTokenizerKind::kQwen35, false, false},
    {"gemma4", PreTokenizerKind::kNewlines, false, false},
    {"granite-embed-multi-311m", PreTokenizerKind::kNewlines, false, false},
    {"sarvam-moe", PreTokenizerKind::kNewlines, false, false},
};

}  // namespace

absl::StatusOr<TokenizerConfig> ResolveTokenizerConfig(absl::string_view model,
                                                       absl::string_view pre) {
  TokenizerConfig c;
  if (model == "llama") {
    c.algorithm = TokenizerConfig::Algorithm::kSpm;
    c.pre = PreTokenizerKind::kWhole;
    c.pre_name = "default";
    c.byte_level = false;
    c.escape_whitespaces = true;
    c.add_space_prefix = true;
    c.add_bos = true;
    c.bos_id = 1;
    c.eos_id = 2;
    c.unk_id = 0;
    return c;
  }
  if (model != "gpt2" && model != "gemma4") {
    return absl::UnimplementedError(absl::StrCat(
        "tokenizer.ggml.model = '", model,
        "' is not supported (supported: llama = SentencePiece, gpt2 = BPE, gemma4)"));
  }
  c.pre_name = model == "gemma4" ? "gemma4" : pre.empty() ? "default" : std::string(pre);
  const PreEntry* entry = nullptr;
  for (const PreEntry& e : kPreEntries) {
    if (c.pre_name == e.name) entry = &e;
  }
  if (entry == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        "tokenizer.ggml.pre = '", c.pre_name,
        "' is not supported: Weft does not reproduce llama.cpp's pre-tokenizer of that name "
        "(see common/tokenizer_config.h for the supported ones)"));
  }
  c.pre = entry->kind;
  c.ignore_merges = entry->ignore_merges;
  c.add_bos = entry->add_bos;
  if (model == "gpt2") {
    c.bos_id = 11;  // llama.cpp's defaults for gpt2 vocabularies
    c.eos_id = 11;
  }
  if (entry->kind == PreTokenizerKind::kNewlines) {
    c.byte_level = false;
    c.escape_whitespaces = true;
    const bool gemma4 = c.pre_name != "sarvam-moe";
    c.newline_words_whole = gemma4;
    c.force_add_bos = gemma4;
  }
  return c;
}

}  // namespace weft::tokenizer_internal

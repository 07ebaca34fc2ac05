#include "common/tokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/tokenizer_pretokenize.h"
#include "common/tokenizer_unicode.h"

namespace weft {
namespace {

using tokenizer_internal::BpeModel;
using tokenizer_internal::BpeScratch;
using tokenizer_internal::PreTokenizeScratch;

constexpr int64_t kMaxVocab = 1 << 24;

// Pre-tokenizer names whose llama.cpp regexes are {"\p{N}", GPT-2} and whose decoding
// has clean_spaces off: exactly what tokenizer_pretokenize.h and Decode implement.
bool IsSupportedPre(absl::string_view pre) { return pre == "smollm" || pre == "command-r"; }

// llama.cpp's token type -> attribute mapping (llama_vocab::impl::load).
uint32_t AttrFromType(int64_t type) {
  switch (type) {
    case 1: return Tokenizer::kAttrNormal;
    case 2: return Tokenizer::kAttrUnknown;
    case 3: return Tokenizer::kAttrControl;
    case 4: return Tokenizer::kAttrUserDefined;
    case 5: return Tokenizer::kAttrUnused;
    case 6: return Tokenizer::kAttrByte;
    default: return Tokenizer::kAttrUndefined;
  }
}

// Texts llama.cpp recognises (llama_vocab::impl::load, "auto-detect special tokens").
#define WEFT_DEEPSEEK_EOS "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"
constexpr absl::string_view kEotTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", WEFT_DEEPSEEK_EOS, "<end_of_utterance>"};
constexpr absl::string_view kEomTexts[] = {"<|eom_id|>"};
constexpr absl::string_view kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                              "[PAD]"};
constexpr absl::string_view kFimRepTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                              "<REPO>", "<reponame>"};
constexpr absl::string_view kFimSepTexts[] = {"<|file_sep|>"};
constexpr absl::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
    "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
    "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
    "<turn|>", "<|tool_response>", WEFT_DEEPSEEK_EOS, "[e~["};
#undef WEFT_DEEPSEEK_EOS

// A missing required array is a malformed vocabulary, not a lookup miss.
absl::StatusOr<const std::vector<std::string>*> RequiredStringArray(const GgufFile& gguf,
                                                                   absl::string_view key) {
  auto v = gguf.GetStringArray(key);
  if (absl::IsNotFound(v.status())) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF vocabulary has no ", key));
  }
  return v;
}

// llama_decode_text: every character of a byte-level token maps back to one byte.
std::string DecodeByteLevel(absl::string_view text) {
  using namespace tokenizer_internal;  // NOLINT(build/namespaces)
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    const uint32_t cp = DecodeCodepoint(text, &pos);
    const int byte = UnicodeToByte(cp);
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
      continue;
    }
    std::string utf8;
    AppendUtf8(cp, &utf8);
    absl::StrAppend(&out, "[UNK_BYTE_0x");
    for (char c : utf8) absl::StrAppendFormat(&out, "%02x", static_cast<unsigned char>(c));
    absl::StrAppend(&out, text, "]");
  }
  return out;
}

// "<0xHH>" -> the byte; "" otherwise.
std::string DecodeByteToken(absl::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return "";
  int v = 0;
  for (char c : text.substr(3, 2)) {
    v <<= 4;
    if (c >= '0' && c <= '9') v |= c - '0';
    else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
    else return "";
  }
  return std::string(1, static_cast<char>(v));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& gguf) {
  auto model = gguf.GetString("tokenizer.ggml.model");
  if (!model.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF has no usable tokenizer.ggml.model: ", model.status().message()));
  }
  if (*model == "llama") {
    return absl::UnimplementedError(
        "tokenizer.ggml.model = llama (SentencePiece) is not supported; only byte-level "
        "BPE (gpt2) vocabularies are");
  }
  if (*model != "gpt2") {
    return absl::UnimplementedError(
        absl::StrCat("tokenizer.ggml.model = '", *model, "' is not supported (gpt2 only)"));
  }
  WEFT_ASSIGN_OR_RETURN(const std::string pre, [&]() -> absl::StatusOr<std::string> {
    auto v = gguf.GetString("tokenizer.ggml.pre");
    if (absl::IsNotFound(v.status())) return std::string("default");
    return v;
  }());
  if (!IsSupportedPre(pre)) {
    return absl::UnimplementedError(absl::StrCat(
        "tokenizer.ggml.pre = '", pre, "' is not supported (supported: smollm, command-r)"));
  }
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->model_ = *model;
  t->pre_ = pre;
  WEFT_RETURN_IF_ERROR(t->LoadVocab(gguf));
  WEFT_RETURN_IF_ERROR(t->LoadSpecialIds(gguf));
  t->DetectEog();
  t->BuildDecodeTables();
  return t;
}

absl::Status Tokenizer::LoadVocab(const GgufFile& gguf) {
  WEFT_ASSIGN_OR_RETURN(const std::vector<std::string>* tokens,
                        RequiredStringArray(gguf, "tokenizer.ggml.tokens"));
  if (tokens->empty() || static_cast<int64_t>(tokens->size()) > kMaxVocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.ggml.tokens: bad vocabulary size ", tokens->size()));
  }
  const size_t n = tokens->size();
  tokens_ = *tokens;
  attrs_.assign(n, kAttrNormal);
  if (gguf.Find("tokenizer.ggml.token_type") != nullptr) {
    WEFT_ASSIGN_OR_RETURN(const std::vector<int64_t>* types,
                          gguf.GetIntArray("tokenizer.ggml.token_type"));
    if (types->size() < n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer.ggml.token_type has ", types->size(), " entries for ", n, " tokens"));
    }
    for (size_t i = 0; i < n; ++i) attrs_[i] = AttrFromType((*types)[i]);
  }
  token_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (tokens_[i].empty()) tokens_[i] = absl::StrCat("[EMPTY_", i, "]");  // as llama.cpp
    if (!token_to_id_.emplace(tokens_[i], static_cast<int32_t>(i)).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer.ggml.tokens: token ", i, " repeats the text of token ",
          token_to_id_[tokens_[i]]));
    }
  }
  WEFT_ASSIGN_OR_RETURN(const std::vector<std::string>* merges,
                        RequiredStringArray(gguf, "tokenizer.ggml.merges"));
  WEFT_ASSIGN_OR_RETURN(bpe_, BpeModel::Build(tokens_, token_to_id_, *merges));
  return absl::OkStatus();
}

absl::Status Tokenizer::LoadSpecialIds(const GgufFile& gguf) {
  const int32_t n = vocab_size();
  // llama.cpp's defaults for gpt2 vocabularies, dropped when out of range.
  bos_id_ = 11 < n ? 11 : -1;
  eos_id_ = 11 < n ? 11 : -1;
  struct Key {
    const char* name;
    int32_t* id;
  };
  const Key keys[] = {
      {"tokenizer.ggml.bos_token_id", &bos_id_},
      {"tokenizer.ggml.eos_token_id", &eos_id_},
      {"tokenizer.ggml.eot_token_id", &eot_id_},
      {"tokenizer.ggml.eom_token_id", &eom_id_},
      {"tokenizer.ggml.unknown_token_id", &unk_id_},
      {"tokenizer.ggml.fim_pad_token_id", &fim_pad_id_},
      {"tokenizer.ggml.fim_rep_token_id", &fim_rep_id_},
      {"tokenizer.ggml.fim_sep_token_id", &fim_sep_id_},
  };
  for (const Key& k : keys) {
    if (gguf.Find(k.name) == nullptr) continue;
    WEFT_ASSIGN_OR_RETURN(const int64_t v, gguf.GetInt(k.name));
    if (v >= 0 && v < n) *k.id = static_cast<int32_t>(v);  // else llama.cpp keeps the default
  }
  WEFT_ASSIGN_OR_RETURN(add_bos_, gguf.GetBoolOr("tokenizer.ggml.add_bos_token", false));
  WEFT_ASSIGN_OR_RETURN(add_eos_, gguf.GetBoolOr("tokenizer.ggml.add_eos_token", false));
  if (add_bos_ && bos_id_ < 0) return absl::InvalidArgumentError("add_bos_token without BOS");
  if (add_eos_ && eos_id_ < 0) return absl::InvalidArgumentError("add_eos_token without EOS");
  return absl::OkStatus();
}

void Tokenizer::DetectEog() {
  // llama.cpp takes the first match in hash-map order; we take the lowest id. Only the
  // EOT id itself can differ (e.g. SmolLM2: <|endoftext|> and <|im_end|> both qualify;
  // llama.cpp and we both report 0); the EOG set is the same.
  auto detect = [&](int32_t* id, absl::Span<const absl::string_view> texts) {
    if (*id >= 0) return;
    for (absl::string_view text : texts) {
      auto it = token_to_id_.find(text);
      if (it != token_to_id_.end() && (*id < 0 || it->second < *id)) *id = it->second;
    }
    if (*id >= 0) attrs_[*id] |= kAttrControl;  // llama.cpp overrides the token type
  };
  detect(&eot_id_, kEotTexts);
  detect(&eom_id_, kEomTexts);
  detect(&fim_pad_id_, kFimPadTexts);
  detect(&fim_rep_id_, kFimRepTexts);
  detect(&fim_sep_id_, kFimSepTexts);
  // Control tokens named "unused" are unused (they stay special for partitioning).
  for (int32_t i = 0; i < vocab_size(); ++i) {
    if ((attrs_[i] & kAttrControl) && tokens_[i].find("unused") != std::string::npos) {
      attrs_[i] |= kAttrUnused;
    }
  }
  std::vector<int32_t> eog;
  for (int32_t id : {fim_pad_id_, fim_rep_id_, fim_sep_id_, eos_id_, eot_id_, eom_id_}) {
    if (id >= 0) eog.push_back(id);
  }
  for (absl::string_view text : kEogTexts) {
    auto it = token_to_id_.find(text);
    if (it == token_to_id_.end()) continue;
    eog.push_back(it->second);
    attrs_[it->second] |= kAttrControl;
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  eog_ids_ = std::move(eog);
}

void Tokenizer::BuildDecodeTables() {
  const int32_t n = vocab_size();
  piece_offsets_.assign(n + 1, 0);
  for (int32_t i = 0; i < n; ++i) {
    piece_offsets_[i] = static_cast<uint32_t>(piece_bytes_.size());
    const uint32_t a = attrs_[i];
    if (a & (kAttrUnknown | kAttrControl)) continue;  // only with render_special
    if (a & kAttrUserDefined) {
      piece_bytes_ += tokens_[i];
    } else if (a & kAttrNormal) {
      piece_bytes_ += DecodeByteLevel(tokens_[i]);
    } else if (a & kAttrByte) {
      piece_bytes_ += DecodeByteToken(tokens_[i]);
    }
  }
  piece_offsets_[n] = static_cast<uint32_t>(piece_bytes_.size());
  for (int32_t i = 0; i < n; ++i) {
    if (attrs_[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      special_tokens_.push_back(i);
    }
  }
  // llama.cpp uses std::sort; the order among equal lengths only matters for special
  // tokens that overlap each other, which no real vocabulary has.
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(), [&](int32_t a, int32_t b) {
    return tokens_[a].size() > tokens_[b].size();
  });
}

bool Tokenizer::IsEog(int32_t token_id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), token_id);
}

absl::string_view Tokenizer::TokenBytes(int32_t token_id) const {
  if (!IsValid(token_id)) return {};
  const uint32_t b = piece_offsets_[token_id];
  return absl::string_view(piece_bytes_).substr(b, piece_offsets_[token_id + 1] - b);
}

int32_t Tokenizer::FindToken(absl::string_view text) const {
  auto it = token_to_id_.find(text);
  return it == token_to_id_.end() ? -1 : it->second;
}

absl::string_view Tokenizer::TokenText(int32_t token_id) const {
  return IsValid(token_id) ? absl::string_view(tokens_[token_id]) : absl::string_view();
}

std::string Tokenizer::Decode(absl::Span<const int32_t> ids, const DecodeOptions& options) const {
  std::string out;
  for (int32_t id : ids) {
    if (options.render_special && (attr(id) & (kAttrUnknown | kAttrControl))) {
      out.append(tokens_[id]);
    } else {
      const absl::string_view bytes = TokenBytes(id);
      out.append(bytes.data(), bytes.size());
    }
  }
  return out;
}

void Tokenizer::PartitionSpecial(absl::string_view text, bool parse_special,
                                 std::vector<Fragment>* fragments) const {
  fragments->clear();
  if (text.empty()) return;
  fragments->push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  for (int32_t id : special_tokens_) {
    if (!parse_special && (attrs_[id] & (kAttrControl | kAttrUnknown))) continue;
    const std::string& special = tokens_[id];
    if (text.find(special) == absl::string_view::npos) continue;
    next.clear();
    for (const Fragment& f : *fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t begin = f.begin;
      const absl::string_view window = text.substr(0, f.end);
      for (size_t m; (m = window.find(special, begin)) != absl::string_view::npos;) {
        if (m > begin) next.push_back({-1, begin, m});
        next.push_back({id, m, m + special.size()});
        begin = m + special.size();
      }
      if (begin < f.end) next.push_back({-1, begin, f.end});
    }
    fragments->swap(next);
  }
}

void Tokenizer::EncodeText(absl::string_view text, std::vector<int32_t>* out) const {
  std::string canonical;
  if (!tokenizer_internal::IsCanonicalForTokenizer(text)) {
    canonical = tokenizer_internal::CanonicalizeForTokenizer(text);
    text = canonical;
  }
  PreTokenizeScratch pre_scratch;
  BpeScratch bpe_scratch;
  std::vector<absl::string_view> words;
  tokenizer_internal::PreTokenize(text, &pre_scratch, &words);
  for (absl::string_view word : words) bpe_.EncodeWord(word, &bpe_scratch, out);
}

std::vector<int32_t> Tokenizer::Encode(absl::string_view text,
                                       const EncodeOptions& options) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (options.add_bos.value_or(add_bos_) && bos_id_ >= 0) out.push_back(bos_id_);
  std::vector<Fragment> fragments;
  PartitionSpecial(text, options.parse_special, &fragments);
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      out.push_back(f.token);
    } else {
      EncodeText(text.substr(f.begin, f.end - f.begin), &out);
    }
  }
  if (options.add_eos.value_or(add_eos_) && eos_id_ >= 0) out.push_back(eos_id_);
  return out;
}

}  // namespace weft

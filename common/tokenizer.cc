#include "common/tokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "common/tokenizer_pretokenize.h"
#include "common/tokenizer_unicode.h"

namespace weft {
namespace {

using tokenizer_internal::BpeModel;
using tokenizer_internal::BpeScratch;
using tokenizer_internal::PreTokenizeScratch;
using tokenizer_internal::SpmScratch;
using tokenizer_internal::TokenizerConfig;

constexpr int64_t kMaxVocab = 1 << 24;
constexpr absl::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

std::string EscapeSpaces(absl::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (char c : text) {
    if (c == ' ') {
      out.append(kSpmSpace.data(), kSpmSpace.size());
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string UnescapeSpaces(absl::string_view text) {
  return absl::StrReplaceAll(text, {{kSpmSpace, " "}});
}

// C's isspace in the "C" locale (what llama.cpp's lstrip/rstrip test).
bool IsAsciiSpace(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

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
constexpr absl::string_view kFimPreTexts[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
    "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>",
    "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"};
constexpr absl::string_view kFimSufTexts[] = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
    "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "hole\xEF\xBD\x9C>",
    "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"};
constexpr absl::string_view kFimMidTexts[] = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>",
    "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>",
    "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"};
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
  WEFT_ASSIGN_OR_RETURN(const std::string pre, [&]() -> absl::StatusOr<std::string> {
    auto v = gguf.GetString("tokenizer.ggml.pre");
    if (absl::IsNotFound(v.status())) return std::string();
    return v;
  }());
  WEFT_ASSIGN_OR_RETURN(TokenizerConfig config,
                        tokenizer_internal::ResolveTokenizerConfig(*model, pre));
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->config_ = std::move(config);
  t->model_ = *model;
  WEFT_RETURN_IF_ERROR(t->LoadVocab(gguf));
  WEFT_RETURN_IF_ERROR(t->LoadSpecialIds(gguf));
  t->DetectSpecialTokens();
  t->DetectEog();
  t->BuildDecodeTables();
  t->ApplyModelTokenAttrs(gguf);
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
  pre_tokenizer_.emplace(config_.pre);
  if (is_spm()) {
    scores_.assign(n, 0.0f);
    if (gguf.Find("tokenizer.ggml.scores") != nullptr) {
      WEFT_ASSIGN_OR_RETURN(const std::vector<double>* scores,
                            gguf.GetFloatArray("tokenizer.ggml.scores"));
      if (scores->size() < n) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tokenizer.ggml.scores has ", scores->size(), " entries for ", n, " tokens"));
      }
      for (size_t i = 0; i < n; ++i) scores_[i] = static_cast<float>((*scores)[i]);
    }
    spm_.token_to_id = &token_to_id_;
    spm_.scores = &scores_;
    return absl::OkStatus();
  }
  WEFT_ASSIGN_OR_RETURN(const std::vector<std::string>* merges,
                        RequiredStringArray(gguf, "tokenizer.ggml.merges"));
  WEFT_ASSIGN_OR_RETURN(bpe_, BpeModel::Build(tokens_, token_to_id_, *merges, config_.byte_level));
  return absl::OkStatus();
}

absl::Status Tokenizer::LoadSpecialIds(const GgufFile& gguf) {
  const int32_t n = vocab_size();
  // llama.cpp's defaults for the vocabulary kind, dropped when out of range.
  auto in_range = [n](int32_t id) { return id >= 0 && id < n ? id : -1; };
  bos_id_ = in_range(config_.bos_id);
  eos_id_ = in_range(config_.eos_id);
  unk_id_ = in_range(config_.unk_id);
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
      {"tokenizer.ggml.fim_pre_token_id", &fim_pre_id_},
      {"tokenizer.ggml.fim_suf_token_id", &fim_suf_id_},
      {"tokenizer.ggml.fim_mid_token_id", &fim_mid_id_},
      {"tokenizer.ggml.fim_pad_token_id", &fim_pad_id_},
      {"tokenizer.ggml.fim_rep_token_id", &fim_rep_id_},
      {"tokenizer.ggml.fim_sep_token_id", &fim_sep_id_},
      // deprecated names of the first three FIM ids
      {"tokenizer.ggml.prefix_token_id", &fim_pre_id_},
      {"tokenizer.ggml.suffix_token_id", &fim_suf_id_},
      {"tokenizer.ggml.middle_token_id", &fim_mid_id_},
  };
  for (const Key& k : keys) {
    if (gguf.Find(k.name) == nullptr) continue;
    WEFT_ASSIGN_OR_RETURN(const int64_t v, gguf.GetInt(k.name));
    if (v >= 0 && v < n) *k.id = static_cast<int32_t>(v);  // else llama.cpp keeps the default
  }
  WEFT_ASSIGN_OR_RETURN(add_bos_, gguf.GetBoolOr("tokenizer.ggml.add_bos_token", config_.add_bos));
  WEFT_ASSIGN_OR_RETURN(add_eos_, gguf.GetBoolOr("tokenizer.ggml.add_eos_token", config_.add_eos));
  if (config_.force_add_bos) add_bos_ = true;
  WEFT_ASSIGN_OR_RETURN(add_space_prefix_, gguf.GetBoolOr("tokenizer.ggml.add_space_prefix",
                                                          config_.add_space_prefix));
  if (add_bos_ && bos_id_ < 0) return absl::InvalidArgumentError("add_bos_token without BOS");
  if (add_eos_ && eos_id_ < 0) return absl::InvalidArgumentError("add_eos_token without EOS");
  return absl::OkStatus();
}

void Tokenizer::DetectSpecialTokens() {
  // llama.cpp takes the first match in hash-map order; we take the lowest id. Only the
  // id itself can differ when a vocabulary has several candidates (e.g. SmolLM2's EOT:
  // <|endoftext|> and <|im_end|> both qualify; llama.cpp and we both report 0).
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
  detect(&fim_pre_id_, kFimPreTexts);
  detect(&fim_suf_id_, kFimSufTexts);
  detect(&fim_mid_id_, kFimMidTexts);
  detect(&fim_pad_id_, kFimPadTexts);
  detect(&fim_rep_id_, kFimRepTexts);
  detect(&fim_sep_id_, kFimSepTexts);
  // Control tokens named "unused" are unused (they stay special for partitioning).
  for (int32_t i = 0; i < vocab_size(); ++i) {
    if ((attrs_[i] & kAttrControl) && tokens_[i].find("unused") != std::string::npos) {
      attrs_[i] |= kAttrUnused;
    }
  }
}

void Tokenizer::DetectEog() {
  std::vector<int32_t> eog;
  for (int32_t id : {fim_pad_id_, fim_rep_id_, fim_sep_id_}) {
    if (id >= 0) eog.push_back(id);
  }
  for (absl::string_view text : kEogTexts) {
    auto it = token_to_id_.find(text);
    if (it == token_to_id_.end()) continue;
    eog.push_back(it->second);
    attrs_[it->second] |= kAttrControl;
  }
  // gpt-oss: these always render (llama.cpp makes them user-defined).
  for (absl::string_view text : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    if (const int32_t id = FindToken(text); id >= 0) attrs_[id] = kAttrUserDefined;
  }
  for (int32_t id : {eos_id_, eot_id_, eom_id_}) {
    if (id >= 0) eog.push_back(id);
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  auto has = [&](absl::string_view text) {
    const int32_t id = FindToken(text);
    return id >= 0 && std::binary_search(eog.begin(), eog.end(), id);
  };
  auto drop = [&](absl::string_view text, uint32_t attr) {
    const int32_t id = FindToken(text);
    eog.erase(std::remove(eog.begin(), eog.end(), id), eog.end());
    attrs_[id] = attr;
  };
  // o200k_harmony / solar-open: <|end|> ends a message, not the generation.
  const bool has_call = has("<|call|>") || has("<|calls|>");
  if (has("<|end|>") && has_call && (has("<|return|>") || has("<|flush|>"))) {
    drop("<|end|>", kAttrUserDefined);
  }
  // Gemma 4 and PLaMo have a normal </s>.
  if (has("</s>") && (has("<|tool_response>") || has("<|plamo:eos|>"))) {
    drop("</s>", kAttrNormal);
  }
  eog_ids_ = std::move(eog);
}

void Tokenizer::BuildDecodeTables() {
  const int32_t n = vocab_size();
  const bool unescape = config_.escape_whitespaces;
  piece_offsets_.assign(n + 1, 0);
  for (int32_t i = 0; i < n; ++i) {
    piece_offsets_[i] = static_cast<uint32_t>(piece_bytes_.size());
    const uint32_t a = attrs_[i];
    if (a & (kAttrUnknown | kAttrControl)) continue;  // only with render_special
    if (a & kAttrUserDefined) {
      piece_bytes_ += tokens_[i];
    } else if (a & kAttrNormal) {
      piece_bytes_ += unescape ? UnescapeSpaces(tokens_[i]) : DecodeByteLevel(tokens_[i]);
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
  if (is_spm()) tokenizer_internal::FillSpmByteTokens(token_to_id_, unk_id_, &spm_);
}

// llama.cpp's per-model token attributes (the end of llama_vocab::impl::load), set after
// the special-token list and the pieces are built.
void Tokenizer::ApplyModelTokenAttrs(const GgufFile& gguf) {
  std::string name = gguf.GetString("general.name").value_or("");
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const std::string arch = gguf.GetString("general.architecture").value_or("");
  const std::string pre = gguf.GetString("tokenizer.ggml.pre").value_or("");
  auto contains_any = [](absl::string_view s, std::initializer_list<absl::string_view> subs) {
    for (absl::string_view sub : subs) {
      if (s.find(sub) != absl::string_view::npos) return true;
    }
    return false;
  };
  auto set = [&](absl::string_view text, uint32_t attr, bool on) {
    const int32_t id = FindToken(text);
    if (id < 0) return;
    attrs_[id] = on ? (attrs_[id] | attr) : (attrs_[id] & ~attr);
  };
  if (contains_any(pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
      contains_any(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
    set("<mask>", kAttrLstrip, true);
  } else if (contains_any(name, {"phi-3", "phi3"})) {
    for (int32_t id : special_tokens_) attrs_[id] |= kAttrRstrip;
    set("</s>", kAttrRstrip, true);
    for (absl::string_view text : {"<unk>", "<s>", "<|endoftext|>"}) set(text, kAttrRstrip, false);
  } else if (contains_any(name, {"modern-bert"})) {
    set("[MASK]", kAttrLstrip, true);
  }
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

void Tokenizer::PartitionSpecial(absl::string_view text, const EncodeOptions& options,
                                 std::vector<Fragment>* fragments) const {
  fragments->clear();
  if (text.empty()) return;
  fragments->push_back({-1, 0, text.size()});
  const auto& literal = options.literal_spans;
  // True when [b, e) overlaps a literal span.
  auto in_literal = [&](size_t b, size_t e) {
    auto it = std::upper_bound(literal.begin(), literal.end(), b,
                               [](size_t v, const std::pair<size_t, size_t>& s) {
                                 return v < s.second;
                               });
    return it != literal.end() && it->first < e;
  };
  // A cheap filter before searching the text for each of the (up to thousands of)
  // special tokens: the byte pairs the text has.
  const bool filter = special_tokens_.size() > 64;
  std::vector<uint64_t> pairs(filter ? 1 << 10 : 0, 0);  // 65536 bits
  for (size_t i = 0; filter && i + 1 < text.size(); ++i) {
    const uint32_t p = static_cast<uint8_t>(text[i]) << 8 | static_cast<uint8_t>(text[i + 1]);
    pairs[p >> 6] |= uint64_t{1} << (p & 63);
  }
  auto may_contain = [&](const std::string& special) {
    if (!filter || special.size() < 2) return true;
    const uint32_t p = static_cast<uint8_t>(special[0]) << 8 | static_cast<uint8_t>(special[1]);
    return ((pairs[p >> 6] >> (p & 63)) & 1) != 0;
  };
  std::vector<Fragment> next;
  for (int32_t id : special_tokens_) {
    const uint32_t a = attrs_[id];
    if (!options.parse_special && (a & (kAttrControl | kAttrUnknown))) continue;
    const std::string& special = tokens_[id];
    if (!may_contain(special) || text.find(special) == absl::string_view::npos) continue;
    next.clear();
    for (const Fragment& f : *fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t begin = f.begin;
      const absl::string_view window = text.substr(0, f.end);
      for (size_t from = begin, m; (m = window.find(special, from)) != absl::string_view::npos;) {
        if (in_literal(m, m + special.size())) {
          from = m + 1;
          continue;
        }
        size_t left_end = m;
        if (a & kAttrLstrip) {
          while (left_end > begin && IsAsciiSpace(text[left_end - 1])) --left_end;
        }
        if (left_end > begin) next.push_back({-1, begin, left_end});
        next.push_back({id, m, m + special.size()});
        begin = m + special.size();
        if (a & kAttrRstrip) {
          while (begin < f.end && IsAsciiSpace(text[begin])) ++begin;
        }
        from = begin;
      }
      if (begin < f.end) next.push_back({-1, begin, f.end});
    }
    fragments->swap(next);
  }
}

void Tokenizer::EncodeBpe(absl::string_view text, std::vector<int32_t>* out) const {
  std::string escaped;
  if (config_.escape_whitespaces) {
    escaped = EscapeSpaces(text);
    text = escaped;
  }
  std::string canonical;
  if (!tokenizer_internal::IsCanonicalForTokenizer(text)) {
    canonical = tokenizer_internal::CanonicalizeForTokenizer(text);
    text = canonical;
  }
  PreTokenizeScratch pre_scratch;
  BpeScratch bpe_scratch;
  std::vector<absl::string_view> words;
  pre_tokenizer_->Split(text, &pre_scratch, &words);
  std::string encoded;
  for (absl::string_view word : words) {
    if (config_.ignore_merges) {
      encoded.clear();
      if (config_.byte_level) tokenizer_internal::AppendByteEncoded(word, &encoded);
      if (const int32_t id = FindToken(config_.byte_level ? absl::string_view(encoded) : word);
          id >= 0) {
        out->push_back(id);
        continue;
      }
    }
    if (config_.newline_words_whole && word.find_first_not_of('\n') == absl::string_view::npos) {
      if (const int32_t id = FindToken(word); id >= 0) {
        out->push_back(id);
        continue;
      }
    }
    bpe_.EncodeWord(word, &bpe_scratch, out);
  }
}

void Tokenizer::EncodeText(absl::string_view text, bool after_special,
                           std::vector<int32_t>* out) const {
  if (!is_spm()) {
    EncodeBpe(text, out);
    return;
  }
  std::string escaped = add_space_prefix_ && after_special ? std::string(kSpmSpace) : "";
  escaped += EscapeSpaces(text);
  SpmScratch scratch;
  tokenizer_internal::SpmEncode(escaped, spm_, &scratch, out);
}

std::vector<int32_t> Tokenizer::Encode(absl::string_view text,
                                       const EncodeOptions& options) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (options.add_bos.value_or(add_bos_) && bos_id_ >= 0) out.push_back(bos_id_);
  std::vector<Fragment> fragments;
  PartitionSpecial(text, options, &fragments);
  bool after_special = true;  // SentencePiece: the first fragment gets the space prefix
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      out.push_back(f.token);
      after_special = true;
    } else {
      EncodeText(text.substr(f.begin, f.end - f.begin), after_special, &out);
      after_special = false;
    }
  }
  if (options.add_eos.value_or(add_eos_) && eos_id_ >= 0) out.push_back(eos_id_);
  return out;
}

}  // namespace weft

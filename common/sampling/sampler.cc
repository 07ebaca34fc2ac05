#include "common/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace weft {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Candidates sorted per round of the lazy sort (doubles each round).
constexpr size_t kFirstSortedChunk = 64;

absl::Status CheckTokens(absl::Span<const int32_t> tokens, int32_t vocab, const char* what) {
  for (int32_t t : tokens) {
    if (t < 0 || t >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(what, " token id ", t,
                                                     " outside the vocabulary"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

Sampler::Sampler(int32_t vocab_size)
    : vocab_size_(vocab_size),
      l_(vocab_size),
      w_(vocab_size),
      counts_(vocab_size),
      seen_(vocab_size) {
  CHECK_GT(vocab_size, 0);
  CHECK_LE(vocab_size, sampling::kMaxVocab) << "weight sums must stay exact in double";
  cand_.reserve(vocab_size);
  order_.reserve(vocab_size);
}

absl::Status Sampler::Sample(const SamplerParams& params, absl::Span<const float> logits,
                             absl::Span<const int32_t> prompt_tokens,
                             absl::Span<const int32_t> output_tokens, SampleResult* result,
                             absl::string_view allowed_tokens) {
  DCHECK(!params.Check().has_value()) << "unchecked sampling parameters";
  if (params.sample_index < 0) return absl::InvalidArgumentError("sample_index must be >= 0");
  if (static_cast<int64_t>(logits.size()) != vocab_size_) {
    return absl::InvalidArgumentError(absl::StrCat("got ", logits.size(), " logits for a vocabulary of ", vocab_size_));
  }
  if (params.num_logprobs > vocab_size_) {
    return absl::InvalidArgumentError("num_logprobs exceeds the vocabulary");
  }
  if (absl::Status s = CheckTokens(prompt_tokens, vocab_size_, "prompt"); !s.ok()) return s;
  if (absl::Status s = CheckTokens(output_tokens, vocab_size_, "output"); !s.ok()) return s;
  const bool masked = !allowed_tokens.empty();
  if (masked && static_cast<int64_t>(allowed_tokens.size()) != sampling::MaskBytes(vocab_size_)) {
    return absl::InvalidArgumentError(absl::StrCat("token mask of ", allowed_tokens.size(),
                                                   " bytes for a vocabulary of ", vocab_size_));
  }
  const bool penalties = params.repetition_penalty != 1.0f || params.presence_penalty != 0.0f ||
                         params.frequency_penalty != 0.0f;
  if (params.temperature == 0.0f && !penalties && !masked) {
    // Greedy on the raw logits: the same token as below, without the copy.
    const int32_t token = ArgmaxRaw(logits);
    if (token < 0) return absl::InvalidArgumentError("no token has a finite logit");
    result->token = token;
    Logprobs(params, logits, result);
    return absl::OkStatus();
  }
  for (int32_t t = 0; t < vocab_size_; ++t) l_[t] = std::isnan(logits[t]) ? kNegInf : logits[t];
  if (masked) {
    const auto* mask = reinterpret_cast<const uint8_t*>(allowed_tokens.data());
    for (int32_t t = 0; t < vocab_size_; ++t) {
      if (!sampling::MaskAllows(mask, t)) l_[t] = kNegInf;
    }
  }
  ApplyPenalties(params, prompt_tokens, output_tokens);
  int32_t token;
  if (params.temperature == 0.0f) {
    token = Greedy();
    if (l_[token] == kNegInf) token = -1;
  } else {
    token = Draw(params, static_cast<uint32_t>(output_tokens.size()));
  }
  if (token < 0) return absl::InvalidArgumentError("no token has a finite logit");
  result->token = token;
  Logprobs(params, logits, result);
  return absl::OkStatus();
}

void Sampler::ApplyPenalties(const SamplerParams& p, absl::Span<const int32_t> prompt,
                             absl::Span<const int32_t> output) {
  const float rep = p.repetition_penalty;
  if (rep == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f) return;
  touched_.clear();
  auto touch = [&](int32_t t) {
    if (!seen_[t]) {
      seen_[t] = 1;
      touched_.push_back(t);
    }
  };
  for (int32_t t : prompt) touch(t);
  for (int32_t t : output) {
    touch(t);
    ++counts_[t];
  }
  for (int32_t t : touched_) {
    float x = l_[t];
    if (rep != 1.0f) x = x > 0 ? x / rep : x * rep;
    if (counts_[t] > 0) {
      x -= p.frequency_penalty * static_cast<float>(counts_[t]);
      x -= p.presence_penalty;
    }
    l_[t] = x;
    seen_[t] = 0;
    counts_[t] = 0;
  }
}

int32_t Sampler::Greedy() const {
  int32_t best = 0;
  for (int32_t t = 1; t < vocab_size_; ++t) {
    if (l_[t] > l_[best]) best = t;
  }
  return best;
}

int32_t Sampler::ArgmaxRaw(absl::Span<const float> logits) const {
  // The largest non-NaN logit: eight independent chains (NaN never wins a comparison).
  float m[8];
  for (float& x : m) x = kNegInf;
  const int32_t n = vocab_size_;
  int32_t t = 0;
  for (; t + 8 <= n; t += 8) {
    for (int j = 0; j < 8; ++j) m[j] = logits[t + j] > m[j] ? logits[t + j] : m[j];
  }
  for (; t < n; ++t) m[0] = logits[t] > m[0] ? logits[t] : m[0];
  float best = m[0];
  for (int j = 1; j < 8; ++j) best = m[j] > best ? m[j] : best;
  if (best == kNegInf) return -1;  // every logit is -inf or NaN
  for (t = 0; t < n; ++t) {
    if (logits[t] == best) return t;  // the lowest id among ties
  }
  return -1;
}

void Sampler::TopK(int32_t k) {
  auto by_logit = [&](int32_t a, int32_t b) { return l_[a] > l_[b] || (l_[a] == l_[b] && a < b); };
  order_.assign(cand_.begin(), cand_.end());
  std::nth_element(order_.begin(), order_.begin() + (k - 1), order_.end(), by_logit);
  const int32_t kth = order_[k - 1];
  size_t kept = 0;
  for (int32_t t : cand_) {
    if (!by_logit(kth, t)) cand_[kept++] = t;  // t is kth or sorts before it
  }
  cand_.resize(kept);
}

void Sampler::EnsureSorted(size_t n) {
  if (n <= sorted_) return;
  auto by_weight = [&](int32_t a, int32_t b) { return w_[a] > w_[b] || (w_[a] == w_[b] && a < b); };
  const size_t end =
      std::min(order_.size(), std::max(n, sorted_ + std::max(kFirstSortedChunk, sorted_)));
  if (end < order_.size()) {
    std::nth_element(order_.begin() + sorted_, order_.begin() + end, order_.end(), by_weight);
  }
  std::sort(order_.begin() + sorted_, order_.begin() + end, by_weight);
  sorted_ = end;
}

int32_t Sampler::Draw(const SamplerParams& p, uint32_t output_index) {
  cand_.clear();
  for (int32_t t = 0; t < vocab_size_; ++t) {
    l_[t] = l_[t] / p.temperature;
    if (l_[t] != kNegInf) cand_.push_back(t);
  }
  if (cand_.empty()) return -1;
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < cand_.size()) TopK(p.top_k);
  float m = kNegInf;
  for (int32_t t : cand_) m = std::max(m, l_[t]);
  // Integer weights (sampling_math.h); a weight of 0 drops the candidate.
  size_t num_weighted = 0;
  for (int32_t t : cand_) {
    w_[t] = sampling::Weight(l_[t] - m);
    if (w_[t] > 0) cand_[num_weighted++] = t;
  }
  cand_.resize(num_weighted);  // never empty: the top candidate weighs 2^31
  order_.assign(cand_.begin(), cand_.end());
  sorted_ = 0;
  size_t keep = cand_.size();
  if (p.top_p < 1.0f) {
    uint64_t z = 0;
    for (int32_t t : cand_) z += w_[t];
    const double target = sampling::TopPTarget(p.top_p, z);
    uint64_t cum = 0;
    for (size_t k = 0; k < cand_.size(); ++k) {
      EnsureSorted(k + 1);
      cum += w_[order_[k]];
      if (sampling::TopPReached(cum, target)) {
        keep = k + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    // The candidates min_p keeps come first in sorted order (the top one always stays).
    size_t above = 0;
    for (int32_t t : cand_) above += sampling::MinPKeeps(w_[t], p.min_p) ? 1 : 0;
    keep = std::min(keep, std::max<size_t>(above, 1));
  }
  EnsureSorted(keep);
  uint64_t z = 0;
  for (size_t k = 0; k < keep; ++k) z += w_[order_[k]];  // exact: any order gives these bits
  const double target = sampling::DrawTarget(
      sampling::Uniform(p.seed, static_cast<uint32_t>(p.sample_index), output_index), z);
  uint64_t cum = 0;
  for (size_t k = 0; k < keep; ++k) {
    cum += w_[order_[k]];
    if (sampling::DrawReached(cum, target)) return order_[k];
  }
  return order_[keep - 1];
}

void Sampler::Logprobs(const SamplerParams& p, absl::Span<const float> logits,
                       SampleResult* result) {
  result->top_logprobs.clear();
  result->logprob = 0.0f;
  if (p.num_logprobs < 0) return;
  auto raw = [&](int32_t t) { return std::isnan(logits[t]) ? kNegInf : logits[t]; };
  float m = kNegInf;
  for (int32_t t = 0; t < vocab_size_; ++t) m = std::max(m, raw(t));
  double sum = 0.0;
  for (int32_t t = 0; t < vocab_size_; ++t) sum += std::exp(static_cast<double>(raw(t)) - m);
  const double lse = m + std::log(sum);
  result->logprob = static_cast<float>(raw(result->token) - lse);
  const int32_t n = p.num_logprobs;
  if (n == 0) return;
  auto by_logit = [&](int32_t a, int32_t b) {
    return raw(a) > raw(b) || (raw(a) == raw(b) && a < b);
  };
  order_.resize(vocab_size_);
  for (int32_t t = 0; t < vocab_size_; ++t) order_[t] = t;
  std::partial_sort(order_.begin(), order_.begin() + n, order_.end(), by_logit);
  for (int32_t i = 0; i < n; ++i) {
    result->top_logprobs.push_back({order_[i], static_cast<float>(raw(order_[i]) - lse)});
  }
}

sampling::RowParams ToRowParams(const SamplerParams& p, int32_t num_prompt, int32_t num_output) {
  sampling::RowParams d;
  d.temperature = p.temperature;
  d.top_k = p.top_k;
  d.top_p = p.top_p;
  d.min_p = p.min_p;
  d.repetition_penalty = p.repetition_penalty;
  d.presence_penalty = p.presence_penalty;
  d.frequency_penalty = p.frequency_penalty;
  d.sample_index = p.sample_index;
  d.seed = p.seed;
  d.output_index = num_output;
  d.num_prompt = num_prompt;
  return d;
}

}  // namespace weft

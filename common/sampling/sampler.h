// Sampler: picks the next token of one sequence from its logits, on CPU.
//
// The algorithm, exactly (the CUDA twin follows the same steps; the logit arithmetic is
// fp32, the weight arithmetic and the random stream are sampling_math.h's):
//   0. l = the raw logits; NaN counts as -inf, and so does every token a structured
//      output mask (sampling_math.h "token mask") does not allow.
//   1. Penalties over the sequence's history:
//        repetition r != 1: every distinct token in prompt or output:
//                           l = l > 0 ? l / r : l * r            (CTRL / HF / vLLM)
//        frequency f:       l -= f * (count of the token in the output)
//        presence p:        l -= p if the token occurs in the output
//      (presence and frequency see output tokens only, as in OpenAI's API and vLLM).
//   2. temperature == 0: return argmax l, the lowest id among ties (no randomness).
//   3. l = l / temperature.
//   4. top_k > 0: keep the k tokens with the largest l (ties: lower id first).
//      Tokens with l = -inf are never candidates.
//   5. Integer weights W_t = sampling::Weight(l_t - max l) (sampling_math.h:
//      floor(2^31 * exp) by a fixed double polynomial, so the top candidate has
//      W = 2^31; candidates with W = 0, i.e. below 2^-31 of the top, are dropped). Order
//      the candidates by W descending, ties by lower id ("sorted order"). Every sum of
//      weights below is an exact uint64 sum, so its order does not matter.
//   6. top_p < 1: Z = sum of W over the candidates; keep the shortest prefix of the
//      sorted order whose running sum S reaches the target: double(S) >=
//      double(top_p) * double(Z) (at least one token).
//   7. min_p > 0: drop candidates with double(W) < double(min_p) * 2^31.
//   8. Z' = sum of W over what is left. Draw u = sampling::Uniform(seed, sample_index,
//      output_index), where output_index = number of output tokens so far;
//      walk the sorted order adding W and return the first token whose running sum S
//      has double(S) > double(u) * double(Z') (the last one if none).
// The device sampler (kernels/cuda/sampling.h) computes the same steps with the same
// functions of sampling_math.h; its tokens are equal to these by construction.
// Logprobs (num_logprobs >= 0) describe the raw logits, before the mask, penalties and
// temperature: logprob_t = l_t - logsumexp(l) (sum in double, ascending id order); the
// chosen token's, and with num_logprobs = N the N most likely tokens (ties: lower id).
//
// The parameters are checked once, where they enter a process (the scheduler's request
// contract; a worker's plan application, StateCache): Sample() takes them as given.
// Thread-safety: a Sampler holds scratch buffers; use one per thread.
#ifndef WEFT_COMMON_SAMPLING_SAMPLER_H_
#define WEFT_COMMON_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/sampling/sampling_config.h"
#include "common/sampling/sampling_math.h"

namespace weft {

// One sequence's settings: its request's (sampling_config.h, whose Check() is the rule)
// and which sample of the request it is (Philox counter word 0).
struct SamplerParams : SamplingConfig {
  int32_t sample_index = 0;
};

// The device sampler's row settings for p, whose history holds num_prompt prompt tokens
// then num_output output tokens (the one place the fields are copied).
sampling::RowParams ToRowParams(const SamplerParams& p, int32_t num_prompt, int32_t num_output);

// One of the most likely tokens and its logprob.
struct LogprobEntry {
  int32_t token = 0;
  float logprob = 0.0f;
};

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;                    // of `token`, when num_logprobs >= 0
  std::vector<LogprobEntry> top_logprobs;  // num_logprobs entries, most likely first
};

class Sampler {
 public:
  explicit Sampler(int32_t vocab_size);

  int32_t vocab_size() const { return vocab_size_; }

  // Samples from `logits` (vocab_size floats) for a sequence whose history is
  // prompt_tokens followed by output_tokens; the token drawn is output number
  // output_tokens.size(). `params` must pass SamplingConfig::Check (not checked here:
  // once per request, not per token). InvalidArgument for a negative sample index, a
  // wrong logits size, num_logprobs over the vocabulary, token ids out of range, or
  // logits with no finite value (or none the mask allows). `allowed_tokens`: empty, or a
  // token mask of sampling::MaskBytes(vocab_size) bytes (else InvalidArgument).
  absl::Status Sample(const SamplerParams& params, absl::Span<const float> logits,
                      absl::Span<const int32_t> prompt_tokens,
                      absl::Span<const int32_t> output_tokens, SampleResult* result,
                      absl::string_view allowed_tokens = {});

 private:
  void ApplyPenalties(const SamplerParams& p, absl::Span<const int32_t> prompt,
                      absl::Span<const int32_t> output);
  int32_t Greedy() const;
  // Greedy without penalties, on the raw logits (NaN = -inf); -1 when none is finite.
  int32_t ArgmaxRaw(absl::Span<const float> logits) const;
  // Steps 3-8; returns the token.
  int32_t Draw(const SamplerParams& p, uint32_t output_index);
  void TopK(int32_t k);
  // Sorts order_ (the candidates) by (W desc, id asc) up to position n.
  void EnsureSorted(size_t n);
  void Logprobs(const SamplerParams& p, absl::Span<const float> logits,
                SampleResult* result);

  const int32_t vocab_size_;
  std::vector<float> l_;           // working logits
  std::vector<uint32_t> w_;        // integer weights of the candidates (step 5)
  std::vector<int32_t> counts_;    // output occurrences per token (kept all zero between calls)
  std::vector<uint8_t> seen_;      // token in prompt or output (kept all zero between calls)
  std::vector<int32_t> touched_;   // tokens whose counts_/seen_ were set
  std::vector<int32_t> cand_;      // candidate ids, ascending
  std::vector<int32_t> order_;     // candidates, sorted lazily by (w desc, id asc)
  size_t sorted_ = 0;              // order_[0, sorted_) is in final sorted order
};

}  // namespace weft

#endif  // WEFT_COMMON_SAMPLING_SAMPLER_H_

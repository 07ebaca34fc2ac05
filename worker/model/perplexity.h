// Perplexity: teacher-forced scoring of a token sequence, computed exactly as llama.cpp's
// `llama-perplexity` does (tools/perplexity/perplexity.cpp, perplexity()), so the two
// are comparable number for number:
//   * the tokens are cut into n_chunk = min(max_chunks, n_tokens / ctx) chunks of `ctx`;
//   * each chunk is evaluated from an empty KV cache at positions 0 .. ctx-1, its first
//     token replaced by BOS when the vocabulary adds one (options.bos_token >= 0: what
//     llama-perplexity does for add_bos models such as Gemma);
//   * positions first = ctx/2 .. ctx-2 of each chunk are scored, position p predicting
//     token p+1, with log-softmax computed as perplexity.cpp does (float max, expf, sum
//     in double);
//   * perplexity = exp(mean negative log-likelihood) over all scored positions.
// A chunk is one forward pass whose last ctx/2 - 1 ... tokens want logits
// (SequenceChunk::num_logits): the same bits as scoring position by position.
// Runs on any Backend (CPU or CUDA). Thread-safety: one call at a time per backend.
#ifndef WEFT_WORKER_MODEL_PERPLEXITY_H_
#define WEFT_WORKER_MODEL_PERPLEXITY_H_

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/backends/backend.h"

namespace weft {

struct PerplexityOptions {
  int32_t ctx = 512;
  int32_t max_chunks = -1;  // -1: as many as the tokens fill
  int32_t bos_token = -1;   // >= 0: each chunk's first token is replaced by it

  absl::Status Validate() const;
};

struct PerplexityResult {
  double perplexity = 0;
  double stderr_ppl = 0;          // llama.cpp's uncertainty estimate of the perplexity
  int64_t num_scored = 0;
  int32_t num_chunks = 0;
  std::vector<double> running;    // perplexity after each chunk
};

// Log-softmax of `logits[token]`, as perplexity.cpp computes it.
double LogSoftmaxAt(absl::Span<const float> logits, int32_t token);

// Scores `tokens`. `on_position(p, logits)` (optional) sees every scored position p
// (an index into tokens) with its full logits row. `on_chunk(i, running_ppl)` after
// each chunk (progress). FailedPrecondition when the backend's KV pool cannot hold one
// chunk; InvalidArgument when there are fewer than ctx tokens.
// Chunks of options.ctx tokens that `num_tokens` tokens give (capped by max_chunks).
int64_t PerplexityChunks(size_t num_tokens, const PerplexityOptions& options);

absl::StatusOr<PerplexityResult> Perplexity(
    Backend* backend, absl::Span<const int32_t> tokens, const PerplexityOptions& options,
    absl::FunctionRef<void(int64_t, absl::Span<const float>)> on_position =
        [](int64_t, absl::Span<const float>) {},
    absl::FunctionRef<void(int32_t, double)> on_chunk = [](int32_t, double) {});

}  // namespace weft

#endif  // WEFT_WORKER_MODEL_PERPLEXITY_H_

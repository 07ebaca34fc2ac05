// ForwardBatch / ForwardOutput: the input and output of one forward pass over a
// flattened batch, shared by every backend (CPU now; CUDA later takes the same input).
//
// A batch is a list of sequences, each contributing a chunk of consecutive tokens: a
// prompt chunk (chunked prefill), a whole prompt, or one decode token; all are handled
// the same way. The KV of the chunk's tokens is written into the cache during the pass:
// the token at position p goes to block block_table[p / block_size], slot
// p % block_size. Attention for a token at position p reads keys 0..p of its sequence,
// positions below start_pos coming from the cache (computed by earlier steps, or a
// prefix-cache hit).
//
// Preconditions the scheduler guarantees (not checked per token): no two sequences
// of a batch write the same slot, and a block shared by several sequences (prefix cache,
// n > 1) is only read; copy-on-write happens before the step (KvCache::CopyBlock).
//
// Ownership: the spans point into the caller's memory and must stay valid during
// Forward(). Thread-safety: plain data.
#ifndef WEFT_WORKER_MODEL_FORWARD_BATCH_H_
#define WEFT_WORKER_MODEL_FORWARD_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace weft {

struct SequenceChunk {
  // Token ids of the chunk: positions [start_pos, start_pos + token_ids.size()).
  absl::Span<const int32_t> token_ids;
  // Tokens of this sequence already in the cache (vLLM's num_computed_tokens).
  int32_t start_pos = 0;
  // The sequence's block table (weft::BlockId values, as the scheduler sends them; int32
  // so the worker's state and the kernels share it without copies). Must cover
  // positions [0, start_pos + token_ids.size()); extra entries are ignored.
  absl::Span<const int32_t> block_table;
  // Produce logits for the chunk's last token (the sequence will be sampled).
  bool want_logits = false;
  // If > 0: produce logits for the chunk's last num_logits tokens instead (at most the
  // chunk's length), one row each in position order — teacher-forced scoring
  // (perplexity) without a decode step per position. Each row's bits equal what a
  // want_logits chunk ending at that token would give.
  int32_t num_logits = 0;

  // Rows of logits the chunk produces: its last num_logit_rows() tokens.
  int32_t num_logit_rows() const {
    const int32_t n = static_cast<int32_t>(token_ids.size());
    if (num_logits > 0) return num_logits < n ? num_logits : n;
    return want_logits ? 1 : 0;
  }
};

struct ForwardBatch {
  std::vector<SequenceChunk> sequences;

  int64_t num_tokens() const {
    int64_t n = 0;
    for (const SequenceChunk& s : sequences) n += static_cast<int64_t>(s.token_ids.size());
    return n;
  }
};

// What a batch is checked against: the model's sizes and the KV pool's.
struct BatchLimits {
  int32_t context_length = 0;
  int32_t vocab_size = 0;
  int32_t block_size = 0;
  int32_t num_blocks = 0;
};

// The check every backend makes before a forward pass: each chunk has 1 or more tokens,
// all within the context length; token ids are in the vocabulary; the block table covers
// the chunk's positions with block ids of the pool; num_logits >= 0. INVALID_ARGUMENT,
// naming the sequence, otherwise.
absl::Status ValidateBatch(const ForwardBatch& batch, const BatchLimits& limits);

// Logits of the sequences that asked for them, in batch order (a sequence with
// num_logits > 1 has that many consecutive rows). Reuse one ForwardOutput
// across steps: its buffers only grow.
struct ForwardOutput {
  int32_t vocab_size = 0;
  int32_t num_rows = 0;
  std::vector<int32_t> row_sequence;  // row r belongs to batch.sequences[row_sequence[r]]
  std::vector<float> logits;          // num_rows x vocab_size (capacity may be larger)

  const float* Row(int32_t r) const { return logits.data() + int64_t{r} * vocab_size; }
};

}  // namespace weft

#endif  // WEFT_WORKER_MODEL_FORWARD_BATCH_H_

// Token sampling on the GPU: the algorithm of common/sampling/sampler.h (its CPU twin), step for
// step, for a batch of logits rows with per-row parameters and Philox seeds.
//
// Per row (one thread block):
//   0. l = logits, NaN -> -inf; with a token mask (structured output), every token the
//      mask does not allow -> -inf (sampling_math.h "token mask").
//   1. Penalties from the row's count row (its history, kept on the device: every token
//      seen in prompt or output gets l = l > 0 ? l / r : l * r (repetition), then -= f *
//      count and -= p for tokens in the output — the same fp32 operations as the CPU, so
//      the same bits.
//   2. temperature == 0: argmax, lowest id among ties (-1 if every l is -inf).
//   3. l /= temperature;  candidates = tokens with l != -inf.
//   4. top_k: the k largest l, ties to the lower id (exact radix select on the fp32 key,
//      then a scan over tied ids).
//   5. W = sampling::Weight(l - max) for the candidates (common/sampling/sampling_math.h:
//      integers, the top one 2^31, W = 0 drops out); the sorted order is (W desc, id
//      asc).
//   6. top_p: the shortest prefix of the sorted order whose running sum S has
//      double(S) >= double(top_p) * double(sum W).  7. min_p: sampling::MinPKeeps.
//   8. u = sampling::Uniform(seed, sample_index, output_index) (Philox4x32-10, the
//      host's stream); the first token of the sorted order whose running sum S has
//      double(S) > double(u) * double(sum of kept W) (the last kept one if none).
// The sorted order is never materialized: prefix sums in that order are found by a
// 4-bit radix descent over the bits of W, then a scan over tied ids in ascending order.
// Equality with the CPU, by construction: the logit steps are the same fp32 operations;
// the weights are the same function of the same bits; every sum of weights is an exact
// integer (so the device's tree order and the host's sequential order give the same
// value); every threshold is the same single double rounding. Tokens are therefore
// identical, and a row depends only on its own inputs (batch invariant).
// (kernels/cuda/testing/sampling_emulation.h replays this kernel's descent on the host;
// sampling_host_test checks it against the host Sampler without a GPU.)
// The sampled token is added to the row's count row (the next step's history), and
// TokenLogprobs computes logprobs on the device too.
// Thread-safety: launches on the caller's stream.
#ifndef WEFT_KERNELS_CUDA_SAMPLING_H_
#define WEFT_KERNELS_CUDA_SAMPLING_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/sampling/sampling_math.h"

namespace weft::kernels::cuda {

// A count row (one per sequence with penalties, kept on the device across steps): token t
// holds kCountSeen if it occurs in the sequence's prompt or output, plus the number of its
// output occurrences. UpdateCounts builds and extends rows; SampleTokens reads them and
// adds the token it samples.
inline constexpr int32_t kCountSeen = 1 << 30;

struct SampleArgs {
  const float* logits = nullptr;  // rows of `vocab` fp32, logits_stride apart
  int64_t logits_stride = 0;
  const int32_t* logits_rows = nullptr;  // optional [num_rows]: row r samples logits row
                                         // logits_rows[r] (default r); rows may repeat
  int32_t num_rows = 0;
  int32_t vocab = 0;
  const sampling::RowParams* params = nullptr;  // [num_rows], device memory
  float* work = nullptr;  // num_rows * vocab floats of scratch (later the weights' bits)
  // Count rows of `vocab` ints; row r uses row count_rows[r] (optional; -1 or null: none,
  // i.e. an empty history). A row with penalties applies them from its count row; every
  // row with a count row adds its sampled token to it (one more output occurrence).
  int32_t* counts = nullptr;
  const int32_t* count_rows = nullptr;  // [num_rows]
  int32_t* tokens = nullptr;  // [num_rows] out: the token, or -1 if no finite logit
  // Optional token masks: row r applies masks + mask_index[r] * MaskBytes(vocab) bytes,
  // none when mask_index[r] < 0 (both null: no row has one).
  const uint8_t* masks = nullptr;
  const int32_t* mask_index = nullptr;  // [num_rows]
};

// One 512-thread block per row with 64 KB of dynamic shared memory. InvalidValue for more
// than 65535 rows or a vocabulary outside [1, sampling::kMaxVocab].
cudaError_t SampleTokens(const SampleArgs& args, cudaStream_t stream);

// Count-row maintenance, in this order: rows zero_rows[0, num_zero) are zeroed, then each
// mark (row, token, is_output) sets kCountSeen on the token and, if is_output, adds one.
// Tokens must be in [0, vocab). Two kernels (none when a list is empty).
struct CountUpdate {
  int32_t* counts = nullptr;
  int32_t vocab = 0;
  const int32_t* zero_rows = nullptr;
  int32_t num_zero = 0;
  const int32_t* marks = nullptr;  // [num_marks][3]
  int32_t num_marks = 0;
};
cudaError_t UpdateCounts(const CountUpdate& args, cudaStream_t stream);

// Logprobs of the raw logits (common/sampling/sampler.h: NaN = -inf; before the mask,
// penalties and temperature): for row j, logits row logits_rows[j] and the token
// tokens[token_index[j]] sampled from it, logprob[j] = l_token - logsumexp(l) (the sum in
// double), and its num_top[j] (<= max_top) most likely tokens (ties: lower id) into
// top_ids / top_logprobs [j * max_top, ...). Equal to the host Sampler's ids; the values
// to the rounding of the double sum's order. One 512-thread block per row: two passes over
// the row for the log-sum-exp and one for the top N (each thread keeps its own best N, up
// to 32; the block merges those lists), plus one pass per alternative past 32.
struct LogprobArgs {
  const float* logits = nullptr;
  int64_t logits_stride = 0;
  int32_t vocab = 0;
  int32_t num_rows = 0;
  int32_t max_top = 0;
  const int32_t* logits_rows = nullptr;  // [num_rows]
  const int32_t* tokens = nullptr;       // sampled tokens (SampleArgs::tokens)
  const int32_t* token_index = nullptr;  // [num_rows]
  const int32_t* num_top = nullptr;      // [num_rows]
  float* logprob = nullptr;              // [num_rows] out
  int32_t* top_ids = nullptr;            // [num_rows * max_top] out
  float* top_logprobs = nullptr;         // [num_rows * max_top] out
};
cudaError_t TokenLogprobs(const LogprobArgs& args, cudaStream_t stream);

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_SAMPLING_H_

// Token sampling on the GPU: the algorithm of worker/sampler.h (its CPU twin), step for
// step, for a batch of logits rows with per-row parameters and Philox seeds.
//
// Per row (one thread block):
//   0. l = logits, NaN -> -inf.
//   1. Penalties over the row's history (prompt then output tokens): every distinct
//      token gets l = l > 0 ? l / r : l * r (repetition), then -= f * count and -= p for
//      tokens in the output — the same fp32 operations as the CPU, so the same bits.
//   2. temperature == 0: argmax, lowest id among ties (-1 if every l is -inf).
//   3. l /= temperature;  candidates = tokens with l != -inf.
//   4. top_k: the k largest l, ties to the lower id (exact radix select on the fp32 key,
//      then a scan over tied ids).
//   5. w = exp(l - max) for the candidates; the sorted order is (w desc, id asc).
//   6. top_p: the shortest prefix of the sorted order whose running sum reaches
//      top_p * sum(w).  7. min_p: drop w < min_p.
//   8. u = Philox4x32-10(key = seed, counter = (sample_index, output_index)) as in
//      worker/philox.h; the first token of the sorted order whose running sum exceeds
//      u * sum(kept w) (the last kept one if rounding leaves none).
// The sorted order is never materialized: prefix sums in that order are found by a
// 4-bit radix descent over the fp32 bits of w (16 bucket sums per pass, summed by a
// fixed shuffle tree), then a scan over tied ids in ascending order.
// Exactness vs the CPU: identical steps, orders and tie-breaks; penalties, temperature
// and the candidate sets are bitwise the same; w is exp computed in double and rounded
// (the CPU's expf is within 0.502 ulp, so w agrees except in rare last-bit cases); sums
// are in a fixed tree order instead of sequential, so a draw can differ only when u*Z
// lands within fp32 rounding of a boundary. Deterministic run to run; a row depends only
// on its own inputs (batch invariant).
// Logprobs are not computed here (the host sampler does them).
// Thread-safety: launches on the caller's stream.
#ifndef WEFT_KERNELS_CUDA_SAMPLING_H_
#define WEFT_KERNELS_CUDA_SAMPLING_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace weft::kernels::cuda {

struct RowSamplingParams {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t sample_index = 0;
  uint64_t seed = 0;
  int32_t output_index = 0;  // output tokens so far (Philox counter word 1)
  int32_t num_prompt = 0;    // history entries that are prompt tokens
};

struct SampleArgs {
  const float* logits = nullptr;  // rows of `vocab` fp32, logits_stride apart
  int64_t logits_stride = 0;
  const int32_t* logits_rows = nullptr;  // optional [num_rows]: row r samples logits row
                                         // logits_rows[r] (default r); rows may repeat
  int32_t num_rows = 0;
  int32_t vocab = 0;
  const RowSamplingParams* params = nullptr;  // [num_rows], device memory
  // Row r's history (prompt then output ids) is history[history_offsets[r] ..
  // history_offsets[r + 1]); ids must be in [0, vocab).
  const int32_t* history = nullptr;
  const int64_t* history_offsets = nullptr;  // [num_rows + 1]
  float* work = nullptr;     // num_rows * vocab floats of scratch
  int32_t* counts = nullptr;  // num_rows * vocab ints, zero on entry; left zero
  int32_t* tokens = nullptr;  // [num_rows] out: the token, or -1 if no finite logit
};

cudaError_t SampleTokens(const SampleArgs& args, cudaStream_t stream);

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_SAMPLING_H_

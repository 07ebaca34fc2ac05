// Token sampling on the GPU: the algorithm of common/sampling/sampler.h (its CPU twin), step for
// step, for a batch of logits rows with per-row parameters and Philox seeds.
//
// Per row (one thread block):
//   0. l = logits, NaN -> -inf; with a token mask (structured output), every token the
//      mask does not allow -> -inf (sampling_math.h "token mask").
//   1. Penalties over the row's history (prompt then output tokens): every distinct
//      token gets l = l > 0 ? l / r : l * r (repetition), then -= f * count and -= p for
//      tokens in the output — the same fp32 operations as the CPU, so the same bits.
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
// Logprobs are not computed here (the host sampler does them).
// Thread-safety: launches on the caller's stream.
#ifndef WEFT_KERNELS_CUDA_SAMPLING_H_
#define WEFT_KERNELS_CUDA_SAMPLING_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/sampling/sampling_math.h"

namespace weft::kernels::cuda {

struct SampleArgs {
  const float* logits = nullptr;  // rows of `vocab` fp32, logits_stride apart
  int64_t logits_stride = 0;
  const int32_t* logits_rows = nullptr;  // optional [num_rows]: row r samples logits row
                                         // logits_rows[r] (default r); rows may repeat
  int32_t num_rows = 0;
  int32_t vocab = 0;
  const sampling::RowParams* params = nullptr;  // [num_rows], device memory
  // Row r's history (prompt then output ids) is history[history_offsets[r] ..
  // history_offsets[r + 1]); ids must be in [0, vocab).
  const int32_t* history = nullptr;
  const int64_t* history_offsets = nullptr;  // [num_rows + 1]
  float* work = nullptr;     // num_rows * vocab floats of scratch (later the weights' bits)
  int32_t* counts = nullptr;  // num_rows * vocab ints, zero on entry; left zero
  int32_t* tokens = nullptr;  // [num_rows] out: the token, or -1 if no finite logit
  // Optional token masks: row r applies masks + mask_index[r] * MaskBytes(vocab) bytes,
  // none when mask_index[r] < 0 (both null: no row has one).
  const uint8_t* masks = nullptr;
  const int32_t* mask_index = nullptr;  // [num_rows]
};

// Two kernels (history marks, then one 512-thread block per row with 64 KB of dynamic
// shared memory). InvalidValue for more than 65535 rows or a vocabulary outside
// [1, sampling::kMaxVocab].
cudaError_t SampleTokens(const SampleArgs& args, cudaStream_t stream);

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_SAMPLING_H_

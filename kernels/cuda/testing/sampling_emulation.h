// A host replay of the CUDA sampling kernel (kernels/cuda/sampling.cu), step for step:
// the same radix select for top-k (8-bit digits of the fp32 order key, then the n-th tie
// in ascending id), the same radix descent for the sorted-order crossings (4-bit digits
// of the integer weight, 16 bucket sums per pass, digits walked from 15 down, then the
// tied ids scanned in the kernel's contiguous per-thread chunks of ceil(vocab / 512)),
// with the arithmetic of common/sampling/sampling_math.h. Without a GPU it checks the
// kernel's algorithm (not its CUDA code) against the host Sampler, which walks an
// explicitly sorted order instead (kernels/cuda/sampling_host_test.cc).
// Thread-safety: pure function.
#ifndef WEFT_KERNELS_CUDA_TESTING_SAMPLING_EMULATION_H_
#define WEFT_KERNELS_CUDA_TESTING_SAMPLING_EMULATION_H_

#include <cstdint>
#include <vector>

#include "common/sampling/sampling_math.h"

namespace weft::kernels::cuda::testing {

// The token the kernel draws for one row (-1 if no logit is finite). `history` is the
// prompt then the output tokens (params.num_prompt of them are prompt).
int32_t EmulateDeviceSample(const sampling::RowParams& params, const std::vector<float>& logits,
                            const std::vector<int32_t>& history);

}  // namespace weft::kernels::cuda::testing

#endif  // WEFT_KERNELS_CUDA_TESTING_SAMPLING_EMULATION_H_

// The per-row sampling parameters the CUDA sampling kernel reads (kernels/cuda/sampling.h),
// as plain C++ so that host code without CUDA headers (the sampling emulation and its
// test) can fill them. Mirrors weft::SamplerParams plus the row's history counts.
// Thread-safety: a plain struct.
#ifndef WEFT_KERNELS_CUDA_SAMPLING_TYPES_H_
#define WEFT_KERNELS_CUDA_SAMPLING_TYPES_H_

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

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_SAMPLING_TYPES_H_

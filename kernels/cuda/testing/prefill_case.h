// Prefill-attention test cases shared by the emulated tests of both prefill kernels
// (emulated_prefill_attention_test: the CUDA-core kernel; emulated_prefill_attention_tc_
// test: the tensor-core kernel): chunks of several sequences (a cached prefix, then the
// chunk's tokens) in a shuffled paged KV pool, the CPU reference's output
// (kernels/cpu/paged_attention.h, the same sliding window), one launch of the kernel under
// test over the tiles BuildPrefillTiles makes, and an element-wise comparison.
// Thread-safety: none (one test thread).
#ifndef WEFT_KERNELS_CUDA_TESTING_PREFILL_CASE_H_
#define WEFT_KERNELS_CUDA_TESTING_PREFILL_CASE_H_

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "kernels/cuda/dtypes.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/paged_kv.h"

namespace weft::kernels::cuda::testing {

struct PrefillShape {
  int32_t num_kv_heads, group, head_dim, block_size;
  KvDtype dtype;
  int32_t window = 0;  // sliding window (0: none), for the kernel and the reference
};

struct PrefillKernelUnderTest {
  // Query tokens per tile for a group size (PrefillTileTokens / PrefillTcTileTokens).
  std::function<int32_t(const PrefillShape&)> tile_tokens;
  // The tensor-core kernel rounds q * scale * log2 e to the MMA type (bf16 for bf16 KV,
  // else fp16): the reference then sees q rounded the same way.
  bool rounds_q = false;
  // |out - want| <= tolerance + 2 tolerance |want|.
  std::function<double(const PrefillShape&)> tolerance;
  std::function<void(const PrefillAttentionArgs& a, const PagedKvView& kv)> launch;
};

// Chunks (cached prefix, chunk length) of several sequences in one launch.
void CheckPrefill(const PrefillShape& shape,
                  const std::vector<std::pair<int32_t, int32_t>>& chunks, uint32_t seed,
                  const PrefillKernelUnderTest& k);

}  // namespace weft::kernels::cuda::testing

#endif  // WEFT_KERNELS_CUDA_TESTING_PREFILL_CASE_H_

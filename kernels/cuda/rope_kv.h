// RoPE and the paged KV write fused into one kernel (the decode step's "QKV projection +
// RoPE + KV-cache write": the projection is the GEMM/GEMV before it). For each token t
// of a QKV GEMM output row (q heads, then k heads, then v heads, fp32):
//   q heads are rotated in place (what ApplyRope does to them);
//   k heads are rotated and stored into the paged cache, v heads stored as they are (what
//   ApplyRope on k followed by WritePagedKv does), at slot slot_mapping[t] (< 0: skipped;
//   q is still rotated);
// with exactly the arithmetic of ApplyRope (elementwise.h) and WritePagedKv (paged_kv.h),
// so the bits are theirs (a GPU test compares). The k rows of the QKV buffer are left
// unrotated: nothing reads them after this kernel (attention reads the cache).
// One 128-thread block per token: the token's cos/sin table in shared memory, then one
// thread per q rotation pair and per 8-value K/V group (a K group gathers the partners of
// its 8 dims, which for the NeoX pairing lie in the other half of the rotated dims).
// Thread-safety: launches on the caller's stream; tokens must write disjoint slots.
#ifndef WEFT_KERNELS_CUDA_ROPE_KV_H_
#define WEFT_KERNELS_CUDA_ROPE_KV_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cpu/rope.h"
#include "kernels/cuda/paged_kv.h"

namespace weft::kernels::cuda {

struct RopeKvArgs {
  float* qkv = nullptr;      // rows of (num_heads + 2 * kv.num_kv_heads) * head_dim floats
  int64_t stride = 0;        // floats between rows
  int32_t num_heads = 0;     // query heads (q at column 0, k after them, v after k)
  int64_t num_tokens = 0;
  const int32_t* positions = nullptr;    // [num_tokens]
  const int64_t* slot_mapping = nullptr;  // [num_tokens]
  const double* inv_freq = nullptr;       // rot_dim / 2 doubles (RopeInvFreq)
  int32_t rot_dim = 0;
  RopeStyle style = RopeStyle::kNormal;
};

// InvalidValue for rot_dim odd, > head_dim or > 1024, head_dim % 8 != 0, or an int8
// view without scales.
cudaError_t RopeAndWritePagedKv(const RopeKvArgs& args, const PagedKvView& kv,
                                cudaStream_t stream);

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_ROPE_KV_H_

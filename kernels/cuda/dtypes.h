// Element types of the CUDA kernels' buffers, as runtime values (plain C++, no CUDA
// headers: included by host code and by the .cu files).
//
//   ActDtype     activations a kernel writes for the next GEMM: fp32 or bf16.
//   KvDtype      elements of the paged KV cache (common/kv_dtype.h, every backend's one
//                enum; no f32 here): fp16, bf16, or int8 groups (DESIGN.md: 8
//                consecutive values along head_dim share one fp16 scale = max|x| / 127,
//                q = round(x / scale), symmetric).
//   WeightDtype  dequantized weights: fp16 or bf16.
// fp16 / bf16 values cross the host-device boundary as uint16_t bits.
// Thread-safety: types only.
#ifndef WEFT_KERNELS_CUDA_DTYPES_H_
#define WEFT_KERNELS_CUDA_DTYPES_H_

#include <cstdint>

#include "common/kv_dtype.h"

namespace weft::kernels::cuda {

enum class ActDtype : int32_t {
  kF32 = 0,
  kBf16 = 1,
};

using ::weft::KvDtype;

enum class WeightDtype : int32_t {
  kF16 = 0,
  kBf16 = 1,
};

// Values per int8 KV group (one fp16 scale each).
inline constexpr int32_t kKvInt8Group = 8;

inline int32_t KvElementBytes(KvDtype d) { return d == KvDtype::kInt8 ? 1 : 2; }
inline int32_t ActElementBytes(ActDtype d) { return d == ActDtype::kF32 ? 4 : 2; }

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_DTYPES_H_

// KvDtype: the element type of a worker's paged KV cache — one enum for every backend
// and kernel family (kernels/cpu's tiles, kernels/cuda's pools), with its one parser
// (--kv_dtype), its names and the one default.
//
//   kF16    fp16 (the default, as llama.cpp's)      kBf16   bf16
//   kInt8   int8 with fp16 scales: on CPU one per token and kv head (kernels/cpu/kv_layout.h),
//           on CUDA one per group of 8 along head_dim (kernels/cuda/dtypes.h)
//   kF32    fp32 (CPU only: the exact reference path)
// The values of kF16, kBf16 and kInt8 are the CUDA kernels' runtime codes (0, 1, 2).
// Thread-safety: types and pure functions.
#ifndef WEFT_COMMON_KV_DTYPE_H_
#define WEFT_COMMON_KV_DTYPE_H_

#include <cstdint>

#if !defined(__CUDACC__)  // nvcc (kernels/cuda/dtypes.h) sees the enum only
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#endif

namespace weft {

enum class KvDtype : int32_t {
  kF16 = 0,
  kBf16 = 1,
  kInt8 = 2,
  kF32 = 3,
};

// What a worker's KV cache holds unless told otherwise (--kv_dtype, every options type).
inline constexpr KvDtype kDefaultKvDtype = KvDtype::kF16;
// The --kv_dtype flag of every binary that takes one: default KvDtypeName(kDefaultKvDtype).
inline constexpr char kKvDtypeFlagHelp[] =
    "KV cache element type: f16 (the default, as llama.cpp) | bf16 | int8 (fp16 scales: one "
    "per token and head on CPU, per 8 values on CUDA) | f32 (CPU only)";

// "f16", "bf16", "int8", "f32".
const char* KvDtypeName(KvDtype dtype);

#if !defined(__CUDACC__)
// The names above (and "fp16" for f16); INVALID_ARGUMENT otherwise.
absl::StatusOr<KvDtype> ParseKvDtype(absl::string_view name);
#endif

}  // namespace weft

#endif  // WEFT_COMMON_KV_DTYPE_H_

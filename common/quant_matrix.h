// QuantMatrix: a GGUF weight matrix as the matmul kernels read it, CPU or CUDA: n rows
// ("output features"), row j at data + j * row_stride bytes, holding k weights in GGUF's
// encoding of `type` (a 2-D GGUF tensor with ne = {k, n} has row_stride =
// RowBytes(type, k); a larger stride selects a K-slice of a wider matrix, e.g. a
// tensor-parallel shard of a row-parallel projection). Plain data; the bytes are owned
// elsewhere. Here rather than in kernels/cpu so that the CUDA backend reads weights
// without the CPU kernels' headers (kernels::QuantMatrix is this type).
// Thread-safety: a value type.
#ifndef WEFT_COMMON_QUANT_MATRIX_H_
#define WEFT_COMMON_QUANT_MATRIX_H_

#include <cstdint>

#include "common/ggml_types.h"

namespace weft {

struct QuantMatrix {
  GgmlType type = GgmlType::kF32;
  const uint8_t* data = nullptr;
  int64_t n = 0;           // rows (output features)
  int64_t k = 0;           // weights per row (input features)
  int64_t row_stride = 0;  // bytes between consecutive rows
};

}  // namespace weft

#endif  // WEFT_COMMON_QUANT_MATRIX_H_

// The int8 matmul's K formats (Q5_0, Q5_1, Q4_K, Q5_K, Q6_K): byte offsets of the panel
// layout that kernels/cpu/int8_matmul.h describes, shared by the packer, the scalar
// reference and the AVX2 kernel (internal to kernels/). Constants only: the ISA units
// read them in constant expressions, so no code is shared with baseline units.
// Thread-safety: constants and pure functions.
#ifndef WEFT_KERNELS_CPU_INT8_KFORMATS_H_
#define WEFT_KERNELS_CPU_INT8_KFORMATS_H_

#include <cstdint>

#include "common/ggml_types.h"

namespace weft::kernels::kformat {

enum Format : int { kQ5_0 = 0, kQ5_1 = 1, kQ4K = 2, kQ5K = 3, kQ6K = 4 };

struct Layout {
  int64_t blocks;        // 32-weight blocks per group
  int64_t header_bytes;  // fp16 d[16] (+ fp16 m[16] / dmin[16])
  int64_t scale_bytes;   // per block: the sub-block scales (K-quants)
  int64_t hb_bytes;      // per block: high-bit planes (64 per bit above 4)
  int bits;              // bits per quant
};

inline constexpr int64_t kNibbleBytes = 256;  // 4 vectors of 64 bytes
inline constexpr int64_t kVectorBytes = 64;

inline constexpr Layout kLayouts[] = {
    {1, 32, 0, 64, 5},   // Q5_0: d
    {1, 64, 0, 64, 5},   // Q5_1: d, m
    {8, 64, 32, 0, 4},   // Q4_K: d, dmin; sc, mn
    {8, 64, 32, 64, 5},  // Q5_K: d, dmin; sc, mn
    {8, 32, 32, 128, 6}  // Q6_K: d; sc0, sc1
};

constexpr int64_t BlockBytes(const Layout& l) { return l.scale_bytes + kNibbleBytes + l.hb_bytes; }
constexpr int64_t GroupBytes(const Layout& l) { return l.header_bytes + l.blocks * BlockBytes(l); }
// Offsets inside block t's bytes (which start at header_bytes + t * BlockBytes).
constexpr int64_t NibbleOffset(const Layout& l) { return l.scale_bytes; }
constexpr int64_t HighBitsOffset(const Layout& l) { return l.scale_bytes + kNibbleBytes; }

// The format of a K-format type; -1 for any other type.
int FormatOf(GgmlType type);

}  // namespace weft::kernels::kformat

#endif  // WEFT_KERNELS_CPU_INT8_KFORMATS_H_

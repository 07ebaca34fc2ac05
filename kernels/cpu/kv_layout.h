// How the CPU's paged KV pool lays out each element type (common/kv_dtype.h, the one
// KvDtype of every backend), shared by the cache (worker/kv_cache.h), the attention
// kernels (paged_attention.h) and their ISA-specific translation units. No inline code
// lives here, so including it from a TU built with AVX-512 flags is safe.
#ifndef WEFT_KERNELS_CPU_KV_LAYOUT_H_
#define WEFT_KERNELS_CPU_KV_LAYOUT_H_

#include "common/kv_dtype.h"

namespace weft::kernels {

using ::weft::KvDtype;

// Element types in a CPU pool.
//   kF32   4 bytes per value (the reference).
//   kF16   IEEE half, round-to-nearest-even on write (llama.cpp's default KV type).
//   kBf16  bfloat16, round-to-nearest-even on write.
//   kInt8  symmetric int8 with one scale per token and kv head (its head_dim values):
//          scale = fp16(max|x| / 127), q = round(x / scale) (to nearest even) clamped to
//          [-127, 127] (0 when the scale is 0); x' = q * scale.
// (paged_attention.h places each dtype's K and V tiles in the pool.)
//
// The int8 tiles are laid out for integer dot products over 4 consecutive bytes
// (`vpdpbusd`, AMX): per block of B slots and kv head, with D = head_dim (a multiple of
// 4) and B4 = B rounded up to a multiple of 4:
//   K tile: byte (d, slot s) at ((d / 4) * B + s) * 4 + d % 4, holding q + 128 (biased to
//           unsigned: Q.K takes it as the unsigned operand); D * B4 bytes (the tail past
//           D * B unused); then B fp16 scales (slot s at 2 * s).
//   V tile: byte (s, d) at ((s / 4) * D + d) * 4 + s % 4, holding q (signed); D * B4 bytes
//           (slots past B: 0); then B fp16 scales.
//   Tile bytes: D * B4 + 2 * B.
// Why one scale per token and head, not DESIGN.md's groups of 8 along head_dim: the
// score q.k_j is then one integer dot product times q's and k_j's scales, and P.V folds
// v_j's scale into p_j before p is rounded to 8 bits, so both products are integer sums
// over whole spans of keys. The cost, measured with worker:weft-perplexity on the default
// model (Xeon model 167 with AMX; groups of 8 = main before this format, fp32 attention on
// the dequantized values):
//   text                              kernels     f16 KV   int8, groups of 8   int8, this
//   tests/testdata/ppl_text.txt       avx512vnni  23.3625  23.2834             23.3154
//     (1,275 tokens, +/- 1.77;        amx         23.2252  -                   23.2306
//      llama.cpp 23.2477)
//   /usr/share/common-licenses/       avx512vnni  15.9821  16.0142 (+0.20 %)   16.0545 (+0.45 %)
//     {GPL-3,Apache-2.0,MPL-2.0,      amx         15.9712  -                   16.0003 (+0.18 %)
//      LGPL-2.1} (9,435 tokens, +/- 0.46)
// i.e. one scale per token, with q and p rounded to 8 bits for the integer products, costs
// ~0.25 % perplexity over groups of 8 with fp32 products on the VNNI path: far inside the
// 1.01x bound (llama_accuracy_test) and the texts' standard errors.
// The CUDA backend keeps groups of 8 (kernels/cuda/dtypes.h kKvInt8Group): KV never moves
// between a CPU and a GPU worker, so the two pools need not share a format.
inline constexpr int kKvInt8KBias = 128;

}  // namespace weft::kernels

#endif  // WEFT_KERNELS_CPU_KV_LAYOUT_H_

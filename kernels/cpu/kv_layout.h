// KV cache element types, shared by the cache (worker/kv_cache.h), the attention kernels
// (paged_attention.h) and their ISA-specific translation units. Only the enum lives here
// (no inline code), so including it from a TU built with AVX-512 flags is safe.
#ifndef WEFT_KERNELS_CPU_KV_LAYOUT_H_
#define WEFT_KERNELS_CPU_KV_LAYOUT_H_

namespace weft::kernels {

// Element type of a paged KV pool.
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
// over whole spans of keys. Measured on the default model (worker/model:
// llama_accuracy_test, perplexity on tests/testdata/ppl_text.txt, llama.cpp 23.2477):
// int8 KV with these integer products 23.2306 on the AMX path, 23.3154 on the VNNI path
// (f16 KV: 23.2252 / 23.3625); with groups of 8 and the same rounding of q and p, 23.21.
enum class KvDtype {
  kF32,
  kF16,
  kBf16,
  kInt8,
};

inline constexpr int kKvInt8KBias = 128;

}  // namespace weft::kernels

#endif  // WEFT_KERNELS_CPU_KV_LAYOUT_H_

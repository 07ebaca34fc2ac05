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
//   kInt8  symmetric int8 in groups of 8 consecutive values along head_dim (DESIGN.md):
//          scale = fp16(max|x| / 127) per group, q = round(x / scale) clamped to
//          [-127, 127] (0 when the scale is 0); x' = q * scale.
enum class KvDtype {
  kF32,
  kF16,
  kBf16,
  kInt8,
};

inline constexpr int kKvInt8Group = 8;

}  // namespace weft::kernels

#endif  // WEFT_KERNELS_CPU_KV_LAYOUT_H_

// CpuFeatures: what this CPU (and the OS) can execute, read once from cpuid/xgetbv at
// run time. Kernels are chosen from it, never from the build machine (no host -march flag):
// the machines Weft runs on differ (Sapphire Rapids with AMX; Ice Lake without AMX or
// AVX-512 BF16).
//
// amx_* are the cpuid bits only, for the log: there are no AMX kernels yet. An AMX
// path must also ask the kernel for the tile state (arch_prctl(ARCH_REQ_XCOMP_PERM,
// XFEATURE_XTILEDATA)) before its first tile instruction.
// Thread-safety: Get() is thread-safe (a function-local static).
#ifndef WEFT_KERNELS_CPU_CPU_FEATURES_H_
#define WEFT_KERNELS_CPU_CPU_FEATURES_H_

#include <string>

namespace weft::kernels {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  bool amx_tile = false;
  bool amx_int8 = false;
  bool amx_bf16 = false;
  // The OS saves the AVX (ymm) / AVX-512 (zmm, opmask) state (XCR0).
  bool os_avx = false;
  bool os_avx512 = false;

  // AVX2 + FMA + F16C with OS support: the AVX2 kernels can run.
  bool HasAvx2() const { return avx2 && fma && f16c && os_avx; }
  // AVX-512 F/BW/VL/DQ with FMA and F16C: the AVX-512 kernels can run.
  bool HasAvx512() const {
    return avx512f && avx512bw && avx512vl && avx512dq && fma && f16c && os_avx512;
  }
  bool HasAvx512Vnni() const { return HasAvx512() && avx512_vnni; }

  // e.g. "avx2 fma f16c avx512f avx512bw avx512vl avx512dq avx512_vnni".
  std::string ToString() const;

  static const CpuFeatures& Get();
};

}  // namespace weft::kernels

#endif  // WEFT_KERNELS_CPU_CPU_FEATURES_H_

// CpuFeatures: what this CPU (and the OS) can execute, read once from cpuid/xgetbv at
// run time. Kernels are chosen from it, never from the build machine (no host -march flag):
// the machines Weft runs on differ (Sapphire Rapids with AMX; Ice Lake without AMX or
// AVX-512 BF16).
//
// AMX: besides the cpuid bits and the OS's XCR0 tile state (os_amx), Linux hands the
// tile data state to a process only on request: Detect() asks once
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) when the CPU and the OS have
// AMX, and amx_permitted records the answer. HasAmxInt8() is all three.
// WEFT_CPU_FEATURES_OFF (read once, at the first Get()): features to treat as absent,
// comma-separated — amx, avx512_bf16, avx512_vnni, avx512 (with everything above it),
// avx2 (likewise). It lets one machine run the code another CPU family would: on an AMX
// Xeon, "amx" gives a Zen 4's choices (AVX-512 with VNNI and BF16, no AMX) and
// "amx,avx512_bf16" an Ice Lake's. test.sh runs the kernel and model tests that way.
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
  bool avx512_vbmi = false;
  bool amx_tile = false;
  bool amx_int8 = false;
  bool amx_bf16 = false;
  // The OS saves the AVX (ymm) / AVX-512 (zmm, opmask) state (XCR0).
  bool os_avx = false;
  bool os_avx512 = false;
  bool os_amx = false;         // XCR0 bits 17 (TILECFG) and 18 (TILEDATA)
  bool amx_permitted = false;  // the kernel granted this process the tile data state
  std::string turned_off;      // the names WEFT_CPU_FEATURES_OFF turned off, comma-separated

  // AVX2 + FMA + F16C with OS support: the AVX2 kernels can run.
  bool HasAvx2() const { return avx2 && fma && f16c && os_avx; }
  // AVX-512 F/BW/VL/DQ with FMA and F16C: the AVX-512 kernels can run.
  bool HasAvx512() const {
    return avx512f && avx512bw && avx512vl && avx512dq && fma && f16c && os_avx512;
  }
  bool HasAvx512Vnni() const { return HasAvx512() && avx512_vnni; }
  // AVX-512 BF16 (vdpbf16ps) on top of HasAvx512().
  bool HasAvx512Bf16() const { return HasAvx512() && avx512_bf16; }
  // AMX int8 tiles usable by this process, with the AVX-512 VNNI the AMX kernels also use.
  bool HasAmxInt8() const { return HasAvx512Vnni() && amx_tile && amx_int8 && os_amx && amx_permitted; }
  // AMX bf16 tiles usable by this process, with the AVX-512 BF16 the bf16 AMX kernels
  // also use.
  bool HasAmxBf16() const {
    return HasAvx512Bf16() && amx_tile && amx_bf16 && os_amx && amx_permitted;
  }

  // e.g. "avx2 fma f16c avx512f avx512bw avx512vl avx512dq avx512_vnni".
  std::string ToString() const;

  static const CpuFeatures& Get();
};

// Applies a WEFT_CPU_FEATURES_OFF list to f (before the AMX permission request, which
// Get() makes only for tiles left on). An unknown name is reported on stderr and ignored.
void TurnOffCpuFeatures(const char* list, CpuFeatures* f);

}  // namespace weft::kernels

#endif  // WEFT_KERNELS_CPU_CPU_FEATURES_H_

#include "kernels/cpu/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace weft::kernels {
namespace {

constexpr long kArchReqXcompPerm = 0x1023;  // arch_prctl code (asm/prctl.h)
constexpr long kXfeatureXtiledata = 18;

// Asks Linux for the AMX tile data state (once per process; later calls are no-ops).
bool RequestAmxPermission() {
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

uint64_t Xgetbv0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t{edx} << 32) | eax;
}

CpuFeatures Detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  f.fma = (c >> 12) & 1;
  f.f16c = (c >> 29) & 1;
  const bool osxsave = (c >> 27) & 1;
  if (osxsave) {
    const uint64_t xcr0 = Xgetbv0();
    f.os_avx = (xcr0 & 0x6) == 0x6;                // SSE + AVX state
    f.os_avx512 = f.os_avx && (xcr0 & 0xE0) == 0xE0;  // opmask, ZMM_Hi256, Hi16_ZMM
    f.os_amx = (xcr0 & 0x60000) == 0x60000;           // TILECFG, TILEDATA
  }
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = (b >> 5) & 1;
  f.avx512f = (b >> 16) & 1;
  f.avx512dq = (b >> 17) & 1;
  f.avx512bw = (b >> 30) & 1;
  f.avx512vl = (b >> 31) & 1;
  f.avx512_vbmi = (c >> 1) & 1;
  f.avx512_vnni = (c >> 11) & 1;
  f.amx_bf16 = (d >> 22) & 1;
  f.amx_tile = (d >> 24) & 1;
  f.amx_int8 = (d >> 25) & 1;
  __cpuid_count(7, 1, a, b, c, d);
  f.avx512_bf16 = (a >> 5) & 1;
  return f;
}

}  // namespace

void TurnOffCpuFeatures(const char* list, CpuFeatures* f) {
  std::string names(list);
  size_t start = 0;
  while (start <= names.size()) {
    size_t end = names.find(',', start);
    if (end == std::string::npos) end = names.size();
    const std::string name = names.substr(start, end - start);
    start = end + 1;
    if (name.empty()) continue;
    if (name == "amx") {
      f->amx_tile = f->amx_int8 = f->amx_bf16 = false;
    } else if (name == "avx512_bf16") {
      f->avx512_bf16 = false;
    } else if (name == "avx512_vnni") {
      f->avx512_vnni = false;
    } else if (name == "avx512") {
      f->avx512f = f->avx512bw = f->avx512vl = f->avx512dq = false;
      f->avx512_vnni = f->avx512_bf16 = f->avx512_vbmi = false;
      f->amx_tile = f->amx_int8 = f->amx_bf16 = false;
    } else if (name == "avx2") {
      f->avx2 = false;
      f->avx512f = f->avx512bw = f->avx512vl = f->avx512dq = false;
      f->avx512_vnni = f->avx512_bf16 = f->avx512_vbmi = false;
      f->amx_tile = f->amx_int8 = f->amx_bf16 = false;
    } else {
      std::fprintf(stderr,
                   "WEFT_CPU_FEATURES_OFF: unknown feature '%s' ignored (known: amx, "
                   "avx512_bf16, avx512_vnni, avx512, avx2)\n",
                   name.c_str());
      continue;
    }
    f->turned_off += f->turned_off.empty() ? name : "," + name;
  }
}

namespace {

CpuFeatures DetectAndPermit() {
  CpuFeatures f = Detect();
  if (const char* off = std::getenv("WEFT_CPU_FEATURES_OFF"); off != nullptr && *off) {
    TurnOffCpuFeatures(off, &f);
  }
  // Asked only for tiles that will be used: a process with AMX turned off never holds
  // the tile data state.
  if (f.amx_tile && f.os_amx) f.amx_permitted = RequestAmxPermission();
  return f;
}

}  // namespace

const CpuFeatures& CpuFeatures::Get() {
  static const CpuFeatures f = DetectAndPermit();
  return f;
}

std::string CpuFeatures::ToString() const {
  std::string s;
  auto add = [&s](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq");
  add(avx512_vnni, "avx512_vnni");
  add(avx512_bf16, "avx512_bf16");
  add(avx512_vbmi, "avx512_vbmi");
  add(amx_tile, "amx_tile");
  add(amx_int8, "amx_int8");
  add(amx_bf16, "amx_bf16");
  if (amx_tile && !(os_amx && amx_permitted)) add(true, "(amx not enabled by the OS)");
  if (s.empty()) s = "none";
  if (!turned_off.empty()) s += " (turned off by WEFT_CPU_FEATURES_OFF: " + turned_off + ")";
  return s;
}

}  // namespace weft::kernels

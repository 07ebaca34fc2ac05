#include "kernels/cpu/cpu_features.h"

#include "gtest/gtest.h"

namespace weft::kernels {
namespace {

// A CPU with everything, as a Sapphire Rapids reports it (AMX granted).
CpuFeatures Everything() {
  CpuFeatures f;
  f.avx2 = f.fma = f.f16c = true;
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = true;
  f.avx512_vnni = f.avx512_bf16 = f.avx512_vbmi = true;
  f.amx_tile = f.amx_int8 = f.amx_bf16 = true;
  f.os_avx = f.os_avx512 = f.os_amx = true;
  f.amx_permitted = true;
  return f;
}

TEST(CpuFeaturesTest, AmxOffLeavesAZen4) {
  CpuFeatures f = Everything();
  TurnOffCpuFeatures("amx", &f);
  EXPECT_FALSE(f.HasAmxInt8());
  EXPECT_FALSE(f.HasAmxBf16());
  EXPECT_TRUE(f.HasAvx512Vnni());
  EXPECT_TRUE(f.HasAvx512Bf16());
  EXPECT_EQ(f.turned_off, "amx");
  EXPECT_NE(f.ToString().find("turned off by WEFT_CPU_FEATURES_OFF: amx"), std::string::npos);
}

TEST(CpuFeaturesTest, AmxAndBf16OffLeavesAnIceLake) {
  CpuFeatures f = Everything();
  TurnOffCpuFeatures("amx,avx512_bf16", &f);
  EXPECT_FALSE(f.HasAmxBf16());
  EXPECT_FALSE(f.HasAvx512Bf16());
  EXPECT_TRUE(f.HasAvx512Vnni());
  EXPECT_EQ(f.turned_off, "amx,avx512_bf16");
}

TEST(CpuFeaturesTest, Avx512OffTakesEverythingAboveIt) {
  CpuFeatures f = Everything();
  TurnOffCpuFeatures("avx512", &f);
  EXPECT_FALSE(f.HasAvx512());
  EXPECT_FALSE(f.HasAvx512Vnni());
  EXPECT_FALSE(f.HasAmxInt8());
  EXPECT_TRUE(f.HasAvx2());
  f = Everything();
  TurnOffCpuFeatures("avx2", &f);
  EXPECT_FALSE(f.HasAvx2());
  EXPECT_FALSE(f.HasAvx512());
}

TEST(CpuFeaturesTest, UnknownNamesAndEmptyItemsAreIgnored) {
  CpuFeatures f = Everything();
  TurnOffCpuFeatures(",sse9,,avx512_vnni,", &f);
  EXPECT_FALSE(f.HasAvx512Vnni());
  EXPECT_TRUE(f.HasAvx512Bf16());
  EXPECT_TRUE(f.HasAmxBf16());
  EXPECT_EQ(f.turned_off, "avx512_vnni");
}

// What this process runs with: whatever WEFT_CPU_FEATURES_OFF says is off is off.
TEST(CpuFeaturesTest, GetHonoursTheEnvironment) {
  const CpuFeatures& f = CpuFeatures::Get();
  const char* off = std::getenv("WEFT_CPU_FEATURES_OFF");
  if (off == nullptr || std::string(off).find("amx") == std::string::npos) {
    GTEST_SKIP() << "WEFT_CPU_FEATURES_OFF does not turn amx off in this run";
  }
  EXPECT_FALSE(f.HasAmxInt8());
  EXPECT_FALSE(f.HasAmxBf16());
  EXPECT_FALSE(f.amx_permitted) << "the tile data state is not requested for AMX turned off";
}

}  // namespace
}  // namespace weft::kernels

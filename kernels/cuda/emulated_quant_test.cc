// The weight kernels' own source (quant.cu) run on the CPU by the host emulation
// (testing/host_emulation.h), against their CPU twins, for every GGUF type the CUDA
// backend computes with (Q5_0, Q5_1, Q4_K, Q5_K, Q6_K included):
//   DequantKernel == DequantizeRow (common/ggml_types.h) rounded to bf16 / fp16, bit for
//     bit, on rows of a wider matrix (a tensor-parallel column slice);
//   GemvKernel == GemvReference (quant_repack.h) up to fp32 summation order, m = 1..4.
// The GPU test quant_test repeats both on the hardware.
#define WEFT_CUDA_HOST_EMULATION 1
#include "kernels/cuda/testing/host_emulation.h"
// The kernels under test, textually (their launch code is compiled out).
#include "kernels/cuda/quant.cu"

#include <cmath>
#include <random>
#include <vector>

#include "common/ggml_types.h"
#include "gtest/gtest.h"
#include "kernels/cuda/quant_repack.h"
#include "kernels/cuda/testing/random_weights.h"

namespace weft::kernels::cuda {
namespace {

template <WeightType kType, typename OutT>
std::vector<OutT> EmulatedDequant(const std::vector<uint8_t>& src, int64_t stride, int64_t n,
                                  int64_t k) {
  std::vector<OutT> out(n * k);
  const int64_t total = n * (k / kQK);
  const unsigned grid = static_cast<unsigned>((total + kDequantThreads - 1) / kDequantThreads);
  EmulateLaunch(dim3(grid), dim3(kDequantThreads), 0, [&] {
    DequantKernel<kType, OutT>(src.data(), stride, n, k, out.data());
  });
  return out;
}

template <WeightType kType>
void CheckDequant() {
  const GgmlType type = static_cast<GgmlType>(kType);
  SCOPED_TRACE(GgmlTypeName(static_cast<uint32_t>(type)));
  const int64_t block = GetGgmlTypeTraits(static_cast<uint32_t>(type))->block_size;
  const int64_t n = 13, k = 512, k_full = 512 + std::max<int64_t>(block, 32) * 2;
  const std::vector<uint8_t> full = testing::RandomGgufMatrix(type, n, k_full, 23);
  const int64_t stride = RowBytes(type, k_full);
  // Columns [skip, skip + k) of each row.
  const int64_t skip = std::max<int64_t>(block, 32);
  std::vector<uint8_t> src(full.begin() + RowBytes(type, skip), full.end());
  std::vector<float> row(k);
  std::vector<uint16_t> want_bf16(n * k), want_f16(n * k);
  for (int64_t j = 0; j < n; ++j) {
    ASSERT_TRUE(DequantizeRow(type, src.data() + j * stride, row.data(), k).ok());
    for (int64_t c = 0; c < k; ++c) {
      want_bf16[j * k + c] = Fp32ToBf16(row[c]);
      want_f16[j * k + c] = Fp32ToFp16(row[c]);
    }
  }
  const std::vector<__nv_bfloat16> bf = EmulatedDequant<kType, __nv_bfloat16>(src, stride, n, k);
  const std::vector<__half> hf = EmulatedDequant<kType, __half>(src, stride, n, k);
  for (int64_t i = 0; i < n * k; ++i) {
    ASSERT_EQ(__bfloat16_as_ushort(bf[i]), want_bf16[i]) << "bf16 element " << i;
    ASSERT_EQ(__half_as_ushort(hf[i]), want_f16[i]) << "fp16 element " << i;
  }
}

TEST(EmulatedQuantTest, DequantizeBitExactForEveryType) {
  CheckDequant<WeightType::kF32>();
  CheckDequant<WeightType::kF16>();
  CheckDequant<WeightType::kBF16>();
  CheckDequant<WeightType::kQ4_0>();
  CheckDequant<WeightType::kQ4_1>();
  CheckDequant<WeightType::kQ8_0>();
  CheckDequant<WeightType::kQ5_0>();
  CheckDequant<WeightType::kQ5_1>();
  CheckDequant<WeightType::kQ4_K>();
  CheckDequant<WeightType::kQ5_K>();
  CheckDequant<WeightType::kQ6_K>();
}

template <WeightType kType>
void CheckGemv(int64_t n, int64_t k) {
  const GgmlType type = static_cast<GgmlType>(kType);
  SCOPED_TRACE(GgmlTypeName(static_cast<uint32_t>(type)));
  const std::vector<uint8_t> bytes = testing::RandomGgufMatrix(type, n, k, 29);
  RepackedMatrix r;
  ASSERT_TRUE(RepackForGemv(kType, bytes.data(), RowBytes(type, k), n, k, &r));
  std::mt19937 rng(8);
  std::normal_distribution<float> val(0.0f, 1.0f);
  for (int32_t m = 1; m <= kMaxGemvRows; ++m) {
    SCOPED_TRACE(m);
    std::vector<__nv_bfloat16> x(m * k);
    std::vector<float> xf(m * k);
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = __float2bfloat16_rn(val(rng));
      xf[i] = __bfloat162float(x[i]);
    }
    GemvWeights w{kType, r.qs.data(), r.d.empty() ? nullptr : r.d.data(),
                  r.m.empty() ? nullptr : r.m.data(), n, k};
    std::vector<float> got(m * n, 0.5f), want(m * n);
    const unsigned grid = static_cast<unsigned>((n + kGemvWarps - 1) / kGemvWarps);
    EmulateLaunch(dim3(grid), dim3(kGemvWarps * 32), 0, [&] {
      GemvKernel<kType, false, false>(w, x.data(), k, GemvNorm{}, m, got.data(), n, false, nullptr,
                                        0, RopeKvArgs{}, PagedKvView{});
    });
    GemvReference(r, xf.data(), k, m, want.data(), n);
    double scale = 0;
    for (float v : want) scale = std::max(scale, std::fabs(double{v}));
    ASSERT_GT(scale, 0.01);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 2e-3 + 1e-4 * std::fabs(want[i]) + 1e-5 * scale) << i;
    }
  }
}

TEST(EmulatedQuantTest, GemvMatchesReferenceForEveryQuantizedType) {
  CheckGemv<WeightType::kQ5_0>(45, 576);
  CheckGemv<WeightType::kQ5_1>(37, 1536);
  CheckGemv<WeightType::kQ4_K>(40, 1536);
  CheckGemv<WeightType::kQ5_K>(21, 768);
  CheckGemv<WeightType::kQ6_K>(33, 2048);
  CheckGemv<WeightType::kQ4_1>(17, 576);  // the repacked layout, beside them
  CheckGemv<WeightType::kQ8_0>(9, 256);
}

}  // namespace
}  // namespace weft::kernels::cuda

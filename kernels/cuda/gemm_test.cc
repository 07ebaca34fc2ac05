// The cuBLAS GEMM wrapper against a CPU fp64 reference on the same bf16 inputs: shapes of
// the default model's projections, m from 1 to 300, fp32 and bf16 output, and beta = 1
// (the fused residual add).
#include "kernels/cuda/gemm.h"

#include <cublas_v2.h>

#include <random>
#include <string>
#include <vector>

#include "common/ggml_types.h"
#include "gtest/gtest.h"
#include "kernels/cuda/testing/cuda_test_util.h"

namespace weft::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::WorstError;

struct GemmCase {
  int64_t m, n, k;
};

// Runs with or without a GPU: the skip reason (e.g. a driver older than the CUDA runtime)
// is there exactly when CudaDeviceCount() finds no device, and names the runtime's error.
TEST(CudaDeviceTest, NoDeviceReasonExplainsACountOfZero) {
  const std::string reason = CudaNoDeviceReason();
  if (CudaDeviceCount() > 0) {
    EXPECT_EQ(reason, "");
  } else {
    EXPECT_NE(reason.find("cudaGetDeviceCount: "), std::string::npos) << reason;
    EXPECT_GT(reason.size(), std::string("cudaGetDeviceCount: ").size()) << reason;
  }
}

class GemmTest : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmTest, MatchesCpuWithResidual) {
  WEFT_SKIP_WITHOUT_CUDA();
  const GemmCase c = GetParam();
  std::mt19937 rng(c.m * 7 + c.n);
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::vector<uint16_t> xb(c.m * c.k), wb(c.n * c.k);
  for (uint16_t& v : xb) v = Fp32ToBf16(val(rng));
  for (uint16_t& v : wb) v = Fp32ToBf16(val(rng) * 0.05f);
  std::vector<float> y0(c.m * c.n);
  for (float& v : y0) v = val(rng);
  std::vector<float> want(c.m * c.n);
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double acc = 0;
      for (int64_t t = 0; t < c.k; ++t) {
        acc += double{Bf16ToFp32(xb[i * c.k + t])} * Bf16ToFp32(wb[j * c.k + t]);
      }
      want[i * c.n + j] = static_cast<float>(acc + y0[i * c.n + j]);
    }
  }
  cublasHandle_t h;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  DeviceArray<uint16_t> dx(xb), dw(wb);
  DeviceArray<float> y(y0);
  ASSERT_EQ(Gemm(h, WeightDtype::kBf16, dx.get(), c.k, dw.get(), c.k, c.m, c.n, c.k, y.get(),
                 ActDtype::kF32, c.n, 1.0f),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_LE(WorstError(y.ToHost(), want, 1e-3, 1e-3), 1.0);
  // bf16 output, no residual.
  for (int64_t i = 0; i < c.m * c.n; ++i) want[i] -= y0[i];
  DeviceArray<uint16_t> y16(c.m * c.n);
  ASSERT_EQ(Gemm(h, WeightDtype::kBf16, dx.get(), c.k, dw.get(), c.k, c.m, c.n, c.k, y16.get(),
                 ActDtype::kBf16, c.n, 0.0f),
            CUBLAS_STATUS_SUCCESS);
  std::vector<float> got;
  for (uint16_t v : y16.ToHost()) got.push_back(Bf16ToFp32(v));
  EXPECT_LE(WorstError(got, want, 1e-3, 1.0 / 128), 1.0);
  cublasDestroy(h);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmTest,
                         ::testing::Values(GemmCase{1, 576 + 2 * 192, 576},
                                           GemmCase{4, 2 * 1536, 576},
                                           GemmCase{17, 576, 1536},
                                           GemmCase{300, 1000, 576}));

}  // namespace
}  // namespace weft::kernels::cuda

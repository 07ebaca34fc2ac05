// The token-wise kernels the model description added (elementwise.cu: the post-norm
// residual add fused into RMSNorm, the per-head QK RMSNorm, bias rows, GeGLU, the scaled
// embedding gather, logit soft-capping) run on the CPU by the host emulation
// (testing/host_emulation.h) against their CPU twins (kernels/cpu/rms_norm.h, swiglu.h
// and the forward pass's own expressions). The GPU test (elementwise_test) repeats the
// pre-existing comparisons on the hardware.
#define WEFT_CUDA_HOST_EMULATION 1
#include "kernels/cuda/testing/host_emulation.h"
// The kernels under test, textually (their launch code is compiled out).
#include "kernels/cuda/elementwise.cu"

#include <cmath>
#include <random>
#include <vector>

#include "common/ggml_types.h"
#include "gtest/gtest.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cpu/swiglu.h"

namespace weft::kernels::cuda {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double rel) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * (1.0 + std::fabs(want[i]))) << i;
  }
}

// Gemma 3's post-norm: x += RMSNorm(delta) * w_post, then the next RMSNorm, in one kernel.
TEST(EmulatedElementwiseTest, PostNormedResidualThenRmsNorm) {
  const int64_t rows = 5, dim = 640;
  std::vector<float> x = Random(rows * dim, 1, 3.0f);
  const std::vector<float> delta = Random(rows * dim, 2, 20.0f);
  const std::vector<float> w_post = Random(dim, 3), w = Random(dim, 4);
  std::vector<float> normed(rows * dim), want_x(rows * dim), want(rows * dim);
  ::weft::kernels::RmsNorm(delta.data(), dim, w_post.data(), rows, dim, 1e-6f, normed.data(),
                           dim);
  for (size_t i = 0; i < x.size(); ++i) want_x[i] = x[i] + normed[i];
  ::weft::kernels::RmsNorm(want_x.data(), dim, w.data(), rows, dim, 1e-6f, want.data(), dim);
  std::vector<float> out(rows * dim, 7.0f);
  RmsNormArgs a;
  a.x = x.data();
  a.x_stride = dim;
  a.delta = delta.data();
  a.delta_stride = dim;
  a.delta_weight = w_post.data();
  a.weight = w.data();
  a.num_rows = rows;
  a.dim = dim;
  a.eps = 1e-6f;
  a.out = out.data();
  a.out_dtype = ActDtype::kF32;
  a.out_stride = dim;
  EmulateLaunch(dim3(rows), dim3(kNormThreads), 0, [&] { RmsNormKernel(a); });
  ExpectClose(x, want_x, 1e-6);  // another summation order for the squares only
  ExpectClose(out, want, 1e-6);
}

TEST(EmulatedElementwiseTest, HeadRmsNormIsRmsNormOfEachHead) {
  for (int32_t hd : {64, 128, 256}) {
    const int64_t tokens = 3, heads = 5, stride = heads * hd + 32;  // a QKV row's q part
    std::vector<float> x = Random(tokens * stride, 5, 4.0f);
    const std::vector<float> w = Random(hd, 6);
    std::vector<float> want = x;
    for (int64_t t = 0; t < tokens; ++t) {
      ::weft::kernels::RmsNorm(x.data() + t * stride, hd, w.data(), heads, hd, 1e-6f,
                               want.data() + t * stride, hd);
    }
    const int64_t rows = tokens * heads;
    EmulateLaunch(dim3((rows + kHeadNormWarps - 1) / kHeadNormWarps), dim3(kHeadNormWarps * 32),
                  0, [&] { HeadRmsNormKernel(x.data(), stride, rows, heads, hd, w.data(), 1e-6f); });
    ExpectClose(x, want, 1e-6);  // the 32 columns past the heads untouched: exactly equal
  }
}

TEST(EmulatedElementwiseTest, BiasGeGluSoftCapAndScaledEmbeddingAreTheCpuExpressions) {
  const int64_t rows = 4, width = 300, stride = 2 * width;
  std::vector<float> x = Random(rows * stride, 7, 3.0f);
  const std::vector<float> bias = Random(width, 8);
  std::vector<float> want = x;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < width; ++j) want[r * stride + j] = x[r * stride + j] + bias[j];
  }
  EmulateLaunch(dim3(1), dim3(kEltThreads), 0,
                [&] { AddRowBiasKernel(x.data(), stride, rows, bias.data(), width); });
  EXPECT_EQ(x, want);

  // GeGLU: gate | up halves of each row, as the fused gate/up GEMM writes them.
  std::vector<float> out(rows * width), cpu(rows * width);
  for (int64_t r = 0; r < rows; ++r) {
    ::weft::kernels::GeluTanhGlu(x.data() + r * stride, x.data() + r * stride + width, width,
                                 cpu.data() + r * width);
  }
  EmulateLaunch(dim3(1), dim3(kEltThreads), 0, [&] {
    GatedKernel<GatedAct::kGeluTanh>(x.data(), x.data() + width, stride, rows, width,
                                     out.data(), ActDtype::kF32, width);
  });
  EXPECT_EQ(out, cpu);  // operation by operation, libm tanhf on both sides here

  const float cap = 30.0f;
  std::vector<float> logits = Random(rows * width, 9, 40.0f), capped(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) capped[i] = cap * std::tanh(logits[i] / cap);
  EmulateLaunch(dim3(1), dim3(kEltThreads), 0,
                [&] { SoftCapKernel(logits.data(), width, rows, width, cap); });
  EXPECT_EQ(logits, capped);

  const int64_t vocab = 7, dim = 48;
  std::vector<uint16_t> table(vocab * dim);
  std::mt19937 rng(10);
  for (uint16_t& v : table) v = Fp32ToBf16(std::normal_distribution<float>(0, 0.05f)(rng));
  const std::vector<int32_t> ids = {3, 0, 6, 9};  // 9: out of range -> zeros
  const float scale = std::sqrt(640.0f);
  std::vector<float> emb(ids.size() * dim, 7.0f);
  EmulateLaunch(dim3(ids.size()), dim3(kEltThreads), 0, [&] {
    EmbeddingKernel(reinterpret_cast<const __nv_bfloat16*>(table.data()), vocab, dim, ids.data(),
                    emb.data(), dim, scale);
  });
  for (size_t t = 0; t < ids.size(); ++t) {
    for (int64_t c = 0; c < dim; ++c) {
      const float want_v =
          ids[t] < vocab ? Bf16ToFp32(table[ids[t] * dim + c]) * scale : 0.0f;
      ASSERT_EQ(emb[t * dim + c], want_v) << t << " " << c;
    }
  }
}

}  // namespace
}  // namespace weft::kernels::cuda

// RMSNorm (+ fused residual), RoPE, SwiGLU and the embedding gather against their CPU
// twins (kernels/cpu/rms_norm.h, rope.h, swiglu.h; exact bf16/fp16 decoding).
#include "kernels/cuda/elementwise.h"

#include <cmath>
#include <random>
#include <vector>

#include "common/ggml_types.h"
#include "gtest/gtest.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/cuda/testing/cuda_test_util.h"

namespace weft::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::WorstError;

std::vector<float> Random(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

class RmsNormTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(RmsNormTest, FusedResidualMatchesCpu) {
  WEFT_SKIP_WITHOUT_CUDA();
  const int64_t dim = GetParam();
  const int64_t rows = 37;
  std::vector<float> x = Random(rows * dim, 1, 3.0f);
  const std::vector<float> delta = Random(rows * dim, 2);
  const std::vector<float> w = Random(dim, 3);
  std::vector<float> want_x(x.size());
  for (size_t i = 0; i < x.size(); ++i) want_x[i] = x[i] + delta[i];
  std::vector<float> want(rows * dim);
  ::weft::kernels::RmsNorm(want_x.data(), dim, w.data(), rows, dim, 1e-5f, want.data(), dim);

  DeviceArray<float> dx(x), ddelta(delta), dw(w), out(rows * dim);
  RmsNormArgs a;
  a.x = dx.get();
  a.x_stride = dim;
  a.delta = ddelta.get();
  a.delta_stride = dim;
  a.weight = dw.get();
  a.num_rows = rows;
  a.dim = dim;
  a.out = out.get();
  a.out_dtype = ActDtype::kF32;
  a.out_stride = dim;
  WEFT_EXPECT_CUDA_OK(RmsNorm(a, nullptr));
  EXPECT_EQ(dx.ToHost(), want_x);  // the residual add is exact
  EXPECT_LE(WorstError(out.ToHost(), want, 1e-6, 2e-6), 1.0);

  // bf16 output: the same values rounded to bf16 (within one bf16 rounding of the fp32
  // result, since the fp32 results differ by an ulp or two).
  DeviceArray<uint16_t> out16(rows * dim);
  a.delta = nullptr;  // x already holds x + delta
  a.out = out16.get();
  a.out_dtype = ActDtype::kBf16;
  WEFT_EXPECT_CUDA_OK(RmsNorm(a, nullptr));
  std::vector<float> got16;
  for (uint16_t h : out16.ToHost()) got16.push_back(Bf16ToFp32(h));
  EXPECT_LE(WorstError(got16, want, 1e-6, 1.0 / 128), 1.0);
}

INSTANTIATE_TEST_SUITE_P(Dims, RmsNormTest, ::testing::Values(576, 4096, 100, 8192));

TEST(RmsNormRowsTest, GathersRows) {
  WEFT_SKIP_WITHOUT_CUDA();
  const int64_t dim = 576, rows = 10;
  const std::vector<float> x = Random(rows * dim, 4);
  const std::vector<float> w = Random(dim, 5);
  const std::vector<int32_t> pick = {9, 0, 4};
  std::vector<float> want(pick.size() * dim);
  for (size_t i = 0; i < pick.size(); ++i) {
    ::weft::kernels::RmsNorm(x.data() + pick[i] * dim, dim, w.data(), 1, dim, 1e-6f, want.data() + i * dim, dim);
  }
  DeviceArray<float> dx(x), dw(w), out(want.size());
  DeviceArray<int32_t> dpick(pick);
  RmsNormArgs a;
  a.x = dx.get();
  a.x_stride = dim;
  a.rows = dpick.get();
  a.weight = dw.get();
  a.num_rows = static_cast<int64_t>(pick.size());
  a.dim = dim;
  a.eps = 1e-6f;
  a.out = out.get();
  a.out_dtype = ActDtype::kF32;
  a.out_stride = dim;
  WEFT_EXPECT_CUDA_OK(RmsNorm(a, nullptr));
  EXPECT_LE(WorstError(out.ToHost(), want, 1e-6, 2e-6), 1.0);
  EXPECT_EQ(dx.ToHost(), x);  // no delta: x untouched
}

struct RopeCase {
  RopeStyle style;
  int32_t head_dim;
  int32_t rot_dim;
};

class RopeTest : public ::testing::TestWithParam<RopeCase> {};

TEST_P(RopeTest, MatchesCpu) {
  WEFT_SKIP_WITHOUT_CUDA();
  const RopeCase c = GetParam();
  const int64_t tokens = 50;
  const int32_t q_heads = 9, k_heads = 3;
  const int64_t qw = q_heads * c.head_dim, kw = k_heads * c.head_dim;
  std::vector<float> q = Random(tokens * qw, 6), k = Random(tokens * kw, 7);
  std::vector<int32_t> pos(tokens);
  std::mt19937 rng(8);
  for (int32_t& p : pos) p = static_cast<int32_t>(rng() % 131072);
  pos[0] = 0;
  const float base = 100000.0f;
  std::vector<float> cs(tokens * c.rot_dim);
  RopeCosSin(pos.data(), tokens, c.rot_dim, base, cs.data());
  std::vector<float> want_q = q, want_k = k;
  ::weft::kernels::ApplyRope(c.style, cs.data(), c.rot_dim, want_q.data(), qw, tokens, q_heads, c.head_dim);
  ::weft::kernels::ApplyRope(c.style, cs.data(), c.rot_dim, want_k.data(), kw, tokens, k_heads, c.head_dim);

  std::vector<double> inv(c.rot_dim / 2);
  RopeInvFreq(base, c.rot_dim, inv.data());
  DeviceArray<float> dq(q), dk(k);
  DeviceArray<int32_t> dpos(pos);
  DeviceArray<double> dinv(inv);
  WEFT_EXPECT_CUDA_OK(ApplyRope(c.style, dpos.get(), dinv.get(), c.rot_dim, c.head_dim, tokens,
                                {dq.get(), qw, q_heads}, {dk.get(), kw, k_heads}, nullptr));
  // Angles agree to the last bit except when the device's double cos/sin (2 ulp) rounds
  // to the other float: allow one fp32 ulp of the inputs' scale.
  EXPECT_LE(WorstError(dq.ToHost(), want_q, 1e-6, 1e-6), 1.0);
  EXPECT_LE(WorstError(dk.ToHost(), want_k, 1e-6, 1e-6), 1.0);
}

INSTANTIATE_TEST_SUITE_P(Styles, RopeTest,
                         ::testing::Values(RopeCase{RopeStyle::kNormal, 64, 64},
                                           RopeCase{RopeStyle::kNeox, 64, 64},
                                           RopeCase{RopeStyle::kNormal, 128, 128},
                                           RopeCase{RopeStyle::kNeox, 128, 64},
                                           RopeCase{RopeStyle::kNormal, 128, 32}));

TEST(SwiGluTest, MatchesCpu) {
  WEFT_SKIP_WITHOUT_CUDA();
  const int64_t tokens = 13, width = 1536;
  const std::vector<float> gu = Random(tokens * 2 * width, 9, 4.0f);
  std::vector<float> want(tokens * width);
  for (int64_t t = 0; t < tokens; ++t) {
    ::weft::kernels::SwiGlu(gu.data() + t * 2 * width, gu.data() + t * 2 * width + width, width,
           want.data() + t * width);
  }
  DeviceArray<float> dgu(gu), out(tokens * width);
  WEFT_EXPECT_CUDA_OK(SwiGlu(dgu.get(), dgu.get() + width, 2 * width, tokens, width, out.get(),
                             ActDtype::kF32, width, nullptr));
  // expf on the device is within 2 ulp of the host's.
  EXPECT_LE(WorstError(out.ToHost(), want, 1e-6, 1e-6), 1.0);
}

TEST(EmbeddingGatherTest, ExactRowsAndZeroForBadIds) {
  WEFT_SKIP_WITHOUT_CUDA();
  const int64_t vocab = 300, dim = 576;
  const std::vector<float> table = Random(vocab * dim, 10);
  const std::vector<int32_t> ids = {0, 299, 17, -1, 300, 17};
  for (WeightDtype dtype : {WeightDtype::kBf16, WeightDtype::kF16}) {
    std::vector<uint16_t> bits(table.size());
    for (size_t i = 0; i < table.size(); ++i) {
      bits[i] = dtype == WeightDtype::kBf16 ? Fp32ToBf16(table[i]) : Fp32ToFp16(table[i]);
    }
    std::vector<float> want(ids.size() * dim, 0.0f);
    for (size_t t = 0; t < ids.size(); ++t) {
      if (ids[t] < 0 || ids[t] >= vocab) continue;
      for (int64_t c = 0; c < dim; ++c) {
        const uint16_t b = bits[ids[t] * dim + c];
        want[t * dim + c] = dtype == WeightDtype::kBf16 ? Bf16ToFp32(b) : Fp16ToFp32(b);
      }
    }
    DeviceArray<uint16_t> dtable(bits);
    DeviceArray<int32_t> dids(ids);
    DeviceArray<float> out(want.size());
    WEFT_EXPECT_CUDA_OK(EmbeddingGather(dtable.get(), dtype, vocab, dim, dids.get(),
                                        static_cast<int64_t>(ids.size()), out.get(), dim,
                                        nullptr));
    EXPECT_EQ(out.ToHost(), want);
  }
}

}  // namespace
}  // namespace weft::kernels::cuda

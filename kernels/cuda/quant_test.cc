// Dequantization (bit-exact against DequantizeRow + round to nearest even), the fused
// dequantizing GEMV (against GemvReference on bf16-rounded inputs) and the fused
// dequantize + tensor-core GEMM (against its twin, testing/quant_gemm_reference.h) on
// random matrices.
#include "kernels/cuda/quant.h"

#include <random>
#include <vector>

#include "common/ggml_types.h"
#include "gtest/gtest.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/quant_gemm.h"
#include "kernels/cuda/quant_repack.h"
#include "kernels/cuda/testing/cuda_test_util.h"
#include "kernels/cuda/testing/quant_gemm_reference.h"
#include "kernels/cuda/testing/random_weights.h"

namespace weft::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::WorstError;

class DequantTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(DequantTest, BitExactBf16AndFp16) {
  WEFT_SKIP_WITHOUT_CUDA();
  const GgmlType type = GetParam();
  const bool kquant = GetGgmlTypeTraits(static_cast<uint32_t>(type))->block_size == 256;
  const int64_t n = 45, k = kquant ? 512 : 576, k_full = kquant ? 768 : 640;
  const std::vector<uint8_t> bytes = testing::RandomGgufMatrix(type, n, k_full, 21);
  const int64_t stride = RowBytes(type, k_full);
  std::vector<float> row(k);
  std::vector<uint16_t> want_bf16(n * k), want_f16(n * k);
  for (int64_t j = 0; j < n; ++j) {
    ASSERT_TRUE(DequantizeRow(type, bytes.data() + j * stride, row.data(), k).ok());
    for (int64_t c = 0; c < k; ++c) {
      want_bf16[j * k + c] = Fp32ToBf16(row[c]);
      want_f16[j * k + c] = Fp32ToFp16(row[c]);
    }
  }
  DeviceArray<uint8_t> src(bytes);
  DeviceArray<uint16_t> out(n * k);
  WEFT_EXPECT_CUDA_OK(DequantizeWeights(static_cast<WeightType>(type), src.get(), stride, n, k,
                                        out.get(), WeightDtype::kBf16, nullptr));
  EXPECT_EQ(out.ToHost(), want_bf16);
  WEFT_EXPECT_CUDA_OK(DequantizeWeights(static_cast<WeightType>(type), src.get(), stride, n, k,
                                        out.get(), WeightDtype::kF16, nullptr));
  EXPECT_EQ(out.ToHost(), want_f16);
}

INSTANTIATE_TEST_SUITE_P(Types, DequantTest,
                         ::testing::Values(GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16,
                                           GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0,
                                           GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ4_K,
                                           GgmlType::kQ5_K, GgmlType::kQ6_K));

struct GemvCase {
  GgmlType type;
  int64_t n, k;
  int32_t m;
};

class GemvTest : public ::testing::TestWithParam<GemvCase> {};

// A random GGUF matrix of c's type and shape (`seed`), repacked for the GEMV (`r`; `ok`:
// the repack succeeded) and on the device: `w` is what QuantGemv, QuantGemm and the folded
// GEMVs read.
struct DeviceGemvMatrix {
  DeviceGemvMatrix(const GemvCase& c, uint32_t seed)
      : bytes(testing::RandomGgufMatrix(c.type, c.n, c.k, seed)),
        ok(RepackForGemv(static_cast<WeightType>(c.type), bytes.data(), RowBytes(c.type, c.k),
                         c.n, c.k, &r)),
        qs(r.qs),
        d(r.d.empty() ? std::vector<uint16_t>(1) : r.d),
        m(r.m.empty() ? std::vector<uint16_t>(1) : r.m),
        w{static_cast<WeightType>(c.type), qs.get(), r.d.empty() ? nullptr : d.get(),
          r.m.empty() ? nullptr : m.get(), c.n, c.k} {}
  const std::vector<uint8_t> bytes;
  RepackedMatrix r;  // before ok: RepackForGemv fills it
  const bool ok;
  DeviceArray<uint8_t> qs;
  DeviceArray<uint16_t> d, m;
  const GemvWeights w;
};

TEST_P(GemvTest, MatchesReference) {
  WEFT_SKIP_WITHOUT_CUDA();
  const GemvCase c = GetParam();
  const DeviceGemvMatrix mat(c, 31);
  ASSERT_TRUE(mat.ok);
  const GemvWeights& w = mat.w;
  std::mt19937 rng(4);
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::vector<uint16_t> xb(c.m * c.k);
  std::vector<float> x(c.m * c.k);
  for (size_t i = 0; i < x.size(); ++i) {
    xb[i] = Fp32ToBf16(val(rng));
    x[i] = Bf16ToFp32(xb[i]);
  }
  std::vector<float> want(c.m * c.n);
  GemvReference(mat.r, x.data(), c.k, c.m, want.data(), c.n);

  DeviceArray<uint16_t> dx(xb);
  std::vector<float> init(c.m * c.n, 0.5f);
  DeviceArray<float> y(init);
  WEFT_EXPECT_CUDA_OK(QuantGemv(w, dx.get(), c.k, c.m, y.get(), c.n, false, nullptr));
  EXPECT_LE(WorstError(y.ToHost(), want, 2e-3, 1e-4), 1.0);
  WEFT_EXPECT_CUDA_OK(QuantGemv(w, dx.get(), c.k, c.m, y.get(), c.n, true, nullptr));
  for (float& v : want) v = v + v;
  EXPECT_LE(WorstError(y.ToHost(), want, 4e-3, 1e-4), 1.0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemvTest,
                         ::testing::Values(GemvCase{GgmlType::kQ4_0, 1000, 4096, 1},
                                           GemvCase{GgmlType::kQ4_1, 576, 576, 4},
                                           GemvCase{GgmlType::kQ4_1, 1536, 576, 3},
                                           GemvCase{GgmlType::kQ8_0, 49152 / 16, 576, 2},
                                           GemvCase{GgmlType::kQ8_0, 7, 1536, 4},
                                           GemvCase{GgmlType::kQ5_0, 577, 576, 1},
                                           GemvCase{GgmlType::kQ5_1, 100, 1536, 3},
                                           GemvCase{GgmlType::kQ4_K, 1536, 2048, 2},
                                           GemvCase{GgmlType::kQ5_K, 300, 768, 4},
                                           GemvCase{GgmlType::kQ6_K, 1024, 4096, 1}));

// The fused gate/up GEMV + SwiGLU gives the bits of QuantGemv into fp32 followed by
// SwiGlu with bf16 output (the two kernels it replaces in a decode step).
TEST_P(GemvTest, SwiGluFusedMatchesGemvThenSwiGlu) {
  WEFT_SKIP_WITHOUT_CUDA();
  GemvCase c = GetParam();
  c.n += c.n % 2;  // [gate; up]: an even number of rows
  const int64_t ffn = c.n / 2;
  const DeviceGemvMatrix mat(c, 37);
  ASSERT_TRUE(mat.ok);
  const GemvWeights& w = mat.w;
  std::mt19937 rng(5);
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::vector<uint16_t> xb(c.m * c.k);
  for (uint16_t& b : xb) b = Fp32ToBf16(val(rng));
  DeviceArray<uint16_t> dx(xb);
  DeviceArray<float> gu(c.m * c.n);
  DeviceArray<uint16_t> want(c.m * ffn), got(c.m * ffn);
  WEFT_EXPECT_CUDA_OK(QuantGemv(w, dx.get(), c.k, c.m, gu.get(), c.n, false, nullptr));
  WEFT_EXPECT_CUDA_OK(SwiGlu(gu.get(), gu.get() + ffn, c.n, c.m, ffn, want.get(),
                             ActDtype::kBf16, ffn, nullptr));
  WEFT_EXPECT_CUDA_OK(QuantGemvSwiGlu(w, dx.get(), c.k, c.m, got.get(), ffn, nullptr));
  EXPECT_EQ(got.ToHost(), want.ToHost());
}

// The RMSNorm folded into the GEMV (QuantGemvNormed / QuantGemvNormedSwiGlu) gives the
// bits of RmsNorm to bf16 followed by QuantGemv / QuantGemvSwiGlu, the kernels it replaces
// in a decode step; the residual rows are not written. Cases whose m * k bf16 rows do
// not fit the kernel's shared memory are refused (cudaErrorInvalidValue) instead.
TEST_P(GemvTest, NormFoldedMatchesRmsNormThenGemv) {
  WEFT_SKIP_WITHOUT_CUDA();
  GemvCase c = GetParam();
  c.n += c.n % 2;
  const int64_t ffn = c.n / 2, ldx = c.k + 16;
  const DeviceGemvMatrix mat(c, 39);
  ASSERT_TRUE(mat.ok);
  const GemvWeights& w = mat.w;
  std::mt19937 rng(7);
  std::normal_distribution<float> val(0.0f, 2.0f);
  std::uniform_real_distribution<float> wv(0.5f, 1.5f);
  std::vector<float> x(c.m * ldx), nw(c.k);
  for (float& v : x) v = val(rng);
  for (float& v : nw) v = wv(rng);
  DeviceArray<float> dxf(x), dnw(nw);
  const GemvNorm norm{dxf.get(), ldx, dnw.get(), 1e-5f};
  if (!GemvNormFits(c.k, c.m)) {
    DeviceArray<float> y(c.m * c.n);
    EXPECT_EQ(QuantGemvNormed(w, norm, c.m, y.get(), c.n, false, nullptr), cudaErrorInvalidValue);
    return;
  }
  RmsNormArgs na;
  DeviceArray<uint16_t> h(c.m * c.k);
  na.x = dxf.get();
  na.x_stride = ldx;
  na.weight = dnw.get();
  na.num_rows = c.m;
  na.dim = c.k;
  na.eps = 1e-5f;
  na.out = h.get();
  na.out_dtype = ActDtype::kBf16;
  na.out_stride = c.k;
  WEFT_EXPECT_CUDA_OK(RmsNorm(na, nullptr));
  DeviceArray<float> want(c.m * c.n), got(c.m * c.n);
  WEFT_EXPECT_CUDA_OK(QuantGemv(w, h.get(), c.k, c.m, want.get(), c.n, false, nullptr));
  WEFT_EXPECT_CUDA_OK(QuantGemvNormed(w, norm, c.m, got.get(), c.n, false, nullptr));
  EXPECT_EQ(got.ToHost(), want.ToHost());
  DeviceArray<uint16_t> act_want(c.m * ffn), act_got(c.m * ffn);
  WEFT_EXPECT_CUDA_OK(QuantGemvSwiGlu(w, h.get(), c.k, c.m, act_want.get(), ffn, nullptr));
  WEFT_EXPECT_CUDA_OK(QuantGemvNormedSwiGlu(w, norm, c.m, act_got.get(), ffn, nullptr));
  EXPECT_EQ(act_got.ToHost(), act_want.ToHost());
  EXPECT_EQ(dxf.ToHost(), x) << "the residual rows are read, never written";
}

using QuantGemmCase = GemvCase;
class QuantGemmTest : public ::testing::TestWithParam<QuantGemmCase> {};

// Split over the device's SMs and unsplit, accumulate off and on, x and y rows wider than
// k and n; the same bits on a second launch. Tolerance: the emulated test's fp32
// summation bound (k + splits + 1 units of 2^-24 of sum |x w|) times 4, for the tensor
// cores' accumulation, which truncates where IEEE addition rounds.
TEST_P(QuantGemmTest, MatchesReferenceSplitAndUnsplit) {
  WEFT_SKIP_WITHOUT_CUDA();
  const QuantGemmCase c = GetParam();
  const int64_t ldx = c.k + 8, ldy = c.n + 3;
  const DeviceGemvMatrix mat(c, 41);
  ASSERT_TRUE(mat.ok);
  const GemvWeights& w = mat.w;
  std::mt19937 rng(6);
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::vector<uint16_t> xb(c.m * ldx, 0);
  for (int32_t i = 0; i < c.m; ++i) {
    for (int64_t e = 0; e < c.k; ++e) xb[i * ldx + e] = Fp32ToBf16(val(rng));
  }
  std::vector<float> y0(c.m * ldy);
  for (float& v : y0) v = val(rng);
  int sms = 0;
  WEFT_EXPECT_CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  DeviceArray<uint16_t> dx(xb);
  DeviceArray<float> partials(static_cast<size_t>(QuantGemmMaxScratchFloats(sms)));
  for (const bool accumulate : {false, true}) {
    const testing::QuantGemmExpected e = testing::QuantGemmReference(
        c.type, mat.bytes.data(), c.n, c.k, xb.data(), ldx, c.m, y0.data(), ldy, accumulate);
    for (const int32_t num_sms : {sms, 0}) {
      SCOPED_TRACE(::testing::Message() << "accumulate " << accumulate << " sms " << num_sms);
      const QuantGemmScratch scratch{num_sms, partials.get()};
      DeviceArray<float> y(y0);
      WEFT_EXPECT_CUDA_OK(QuantGemm(w, dx.get(), ldx, c.m, y.get(), ldy, accumulate, scratch,
                                    nullptr));
      const std::vector<float> got = y.ToHost();
      const double ulps = 4.0 * (c.k + kQuantGemmMaxSplits + 1);
      EXPECT_EQ(testing::QuantGemmMismatch(e, got, y0, c.m, c.n, ldy, ulps), "");
      y.Upload(y0);
      WEFT_EXPECT_CUDA_OK(QuantGemm(w, dx.get(), ldx, c.m, y.get(), ldy, accumulate, scratch,
                                    nullptr));
      EXPECT_EQ(y.ToHost(), got) << "not deterministic";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, QuantGemmTest,
                         ::testing::Values(QuantGemmCase{GgmlType::kQ4_1, 576, 576, 5},
                                           QuantGemmCase{GgmlType::kQ4_1, 576, 576, 256},
                                           QuantGemmCase{GgmlType::kQ8_0, 1536, 576, 64},
                                           QuantGemmCase{GgmlType::kQ8_0, 576, 1536, 17},
                                           QuantGemmCase{GgmlType::kQ4_0, 45, 576, 8},
                                           QuantGemmCase{GgmlType::kQ5_0, 1024, 640, 8},
                                           QuantGemmCase{GgmlType::kQ5_1, 70, 576, 100},
                                           QuantGemmCase{GgmlType::kQ4_K, 640, 2048, 64},
                                           QuantGemmCase{GgmlType::kQ5_K, 300, 768, 33},
                                           QuantGemmCase{GgmlType::kQ6_K, 640, 2048, 17}));

TEST(GemvArgsTest, RejectsBadArguments) {
  GemvWeights w;
  w.type = WeightType::kF16;
  w.n = 1;
  w.k = 32;
  EXPECT_EQ(QuantGemv(w, nullptr, 32, 1, nullptr, 1, false, nullptr), cudaErrorInvalidValue);
  w.type = WeightType::kQ4_0;
  EXPECT_EQ(QuantGemv(w, nullptr, 32, 5, nullptr, 1, false, nullptr), cudaErrorInvalidValue);
  w.n = 3;  // SwiGLU needs [gate; up] pairs
  EXPECT_EQ(QuantGemvSwiGlu(w, nullptr, 32, 1, nullptr, 1, nullptr), cudaErrorInvalidValue);
  w.n = 4;
  float dummy = 0.0f;
  const GemvNorm norm{&dummy, 32, &dummy, 1e-5f};
  EXPECT_EQ(QuantGemvNormed(w, GemvNorm{}, 1, nullptr, 4, false, nullptr),
            cudaErrorInvalidValue);  // no rows
  EXPECT_EQ(QuantGemvNormed(w, GemvNorm{&dummy, 16, &dummy, 1e-5f}, 1, nullptr, 4, false,
                            nullptr),
            cudaErrorInvalidValue);  // ldx < k
  w.k = 8192;
  EXPECT_EQ(QuantGemvNormed(w, GemvNorm{&dummy, 8192, &dummy, 1e-5f}, 4, nullptr, 4, false,
                            nullptr),
            cudaErrorInvalidValue);  // 64 KB of rows: past the shared memory it may take
  w.k = 32;
  {
    // RoPE + KV as the GEMV's epilogue: 2 q heads + 1 kv head of 64 dims.
    w.n = 4 * 64;
    int32_t pos = 0;
    int64_t slot = 0;
    double inv = 1.0;
    RopeKvArgs rope;
    rope.num_heads = 2;
    rope.positions = &pos;
    rope.slot_mapping = &slot;
    rope.inv_freq = &inv;
    rope.rot_dim = 64;
    PagedKvView kv;
    kv.num_kv_heads = 1;
    kv.head_dim = 64;
    kv.block_size = 16;
    kv.dtype = KvDtype::kBf16;
    rope.style = RopeStyle::kNeox;  // pairs 32 dims apart: not in one block's 8 outputs
    EXPECT_EQ(QuantGemvRopeKv(w, nullptr, 32, nullptr, 1, nullptr, 256, rope, kv, nullptr),
              cudaErrorInvalidValue);
    rope.style = RopeStyle::kNormal;
    w.n = 4 * 64 + 8;  // not q + 2 kv heads
    EXPECT_EQ(QuantGemvRopeKv(w, nullptr, 32, nullptr, 1, nullptr, 256, rope, kv, nullptr),
              cudaErrorInvalidValue);
    w.n = 4 * 64;
    kv.dtype = KvDtype::kInt8;  // without scales
    EXPECT_EQ(QuantGemvRopeKv(w, nullptr, 32, nullptr, 1, nullptr, 256, rope, kv, nullptr),
              cudaErrorInvalidValue);
    kv.dtype = KvDtype::kBf16;
    rope.rot_dim = 66;  // > head_dim
    EXPECT_EQ(QuantGemvRopeKv(w, nullptr, 32, nullptr, 1, nullptr, 256, rope, kv, nullptr),
              cudaErrorInvalidValue);
    rope.rot_dim = 64;
    EXPECT_EQ(QuantGemvRopeKv(w, nullptr, 32, nullptr, 0, nullptr, 256, rope, kv, nullptr),
              cudaSuccess) << "no rows: nothing to launch";
  }
  w.n = 3;
  EXPECT_EQ(QuantGemvNormedSwiGlu(w, norm, 1, nullptr, 1, nullptr), cudaErrorInvalidValue);
  const QuantGemmScratch none;
  EXPECT_EQ(QuantGemm(w, nullptr, 32, kMaxQuantGemmRows + 1, nullptr, 3, false, none, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(QuantGemm(w, nullptr, 36, 8, nullptr, 3, false, none, nullptr),  // ldx % 8
            cudaErrorInvalidValue);
  w.type = WeightType::kF16;
  EXPECT_EQ(QuantGemm(w, nullptr, 32, 8, nullptr, 3, false, none, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace weft::kernels::cuda

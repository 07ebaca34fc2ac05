// The fused decode kernels' own source run on the CPU by the host emulation
// (testing/host_emulation.h), against the kernels they replace, also emulated, and the
// CPU twins:
//   RopeKvKernel (rope_kv.cu) == RopeKernel (elementwise.cu) on q and k, then
//     WritePagedKvKernel (paged_kv.cu): the same q bits and KV pool bytes;
//   GemvKernel<kSwiGlu> (quant.cu) == GemvKernel into fp32 then GatedKernel<kSilu>
//     (elementwise.cu): the same activation bits; and close to GemvReference.
//   GemvKernel<kNorm> (the RMSNorm folded into the GEMV, with and without SwiGLU) ==
//     RmsNormKernel to bf16 then GemvKernel: the same output bits, the residual rows
//     unchanged; and the factor is the CPU twin's within rounding.
//   GemvKernel<KvT> (RoPE + KV write as the QKV GEMV's epilogue, with and without the
//     norm folded) == [RmsNormKernel,] GemvKernel then RopeKvKernel: the same QKV buffer
//     bits and KV pool bytes.
// The GPU tests (rope_kv_test, quant_test) repeat the comparisons on the hardware,
// whose expf/sincos differ from the host's.
#define WEFT_CUDA_HOST_EMULATION 1
#include "kernels/cuda/testing/host_emulation.h"
// The kernels under test, textually (their launch code is compiled out).
#include "kernels/cuda/elementwise.cu"
#include "kernels/cuda/paged_kv.cu"
#include "kernels/cuda/quant.cu"
#include "kernels/cuda/rope_kv.cu"

#include <algorithm>
#include <random>
#include <vector>

#include "common/ggml_types.h"
#include "gtest/gtest.h"
#include "kernels/cuda/quant_repack.h"
#include "kernels/cuda/testing/kv_reference.h"
#include "kernels/cuda/testing/random_weights.h"

namespace weft::kernels::cuda {
namespace {

// A paged KV pool of num_blocks blocks in host memory (K, V, then int8's K and V scales
// per block) and views of it, as the kernels address it.
struct TestKvPool {
  TestKvPool(int32_t kv_heads, int32_t block_size, int32_t head_dim, KvDtype dtype,
             int32_t num_blocks)
      : kv_heads(kv_heads), block_size(block_size), head_dim(head_dim), dtype(dtype),
        half(int64_t{kv_heads} * block_size * head_dim), es(KvElementBytes(dtype)),
        block_bytes(2 * half * es + (dtype == KvDtype::kInt8 ? 2 * (half / 8) * 2 : 0)),
        bytes(block_bytes * num_blocks, 0x5a) {}
  // The view of `pool` (this layout; `bytes` or a copy of it).
  PagedKvView View(std::vector<uint8_t>& pool) const {
    PagedKvView v;
    v.k = pool.data();
    v.v = pool.data() + half * es;
    if (dtype == KvDtype::kInt8) {
      v.k_scale = reinterpret_cast<uint16_t*>(pool.data() + 2 * half * es);
      v.v_scale = v.k_scale + half / 8;
    }
    v.block_stride = block_bytes / es;
    v.scale_block_stride = block_bytes / 2;
    v.block_size = block_size;
    v.num_kv_heads = kv_heads;
    v.head_dim = head_dim;
    v.dtype = dtype;
    return v;
  }
  const int32_t kv_heads, block_size, head_dim;
  const KvDtype dtype;
  const int64_t half;
  const int32_t es;
  const int64_t block_bytes;
  std::vector<uint8_t> bytes;  // every byte 0x5a: a slot never written stays so
};

// RmsNormKernel over m rows of k (x rows ldx apart) into bf16 rows of k, emulated.
void EmulatedRmsNormBf16(const float* x, int64_t ldx, const float* weight, int32_t m, int64_t k,
                         float eps, __nv_bfloat16* out) {
  RmsNormArgs na;
  na.x = const_cast<float*>(x);  // read only: no delta
  na.x_stride = ldx;
  na.weight = weight;
  na.num_rows = m;
  na.dim = k;
  na.eps = eps;
  na.out = out;
  na.out_dtype = ActDtype::kBf16;
  na.out_stride = k;
  EmulateLaunch(dim3(m), dim3(kNormThreads), 0, [&] { RmsNormKernel(na); });
}

struct RopeCase {
  RopeStyle style;
  int32_t head_dim, rot_dim, block_size;
  KvDtype dtype;
};

template <typename KvT>
void RunRopeKv(const RopeCase& c) {
  const int32_t q_heads = 4, kv_heads = 2, tokens = 9, num_blocks = 4;
  const int64_t width = int64_t{q_heads + 2 * kv_heads} * c.head_dim;
  std::mt19937 rng(7);
  std::normal_distribution<float> val(0.0f, 2.0f);
  std::vector<float> qkv(tokens * width);
  for (float& x : qkv) x = val(rng);
  std::vector<int32_t> pos(tokens);
  std::vector<int64_t> slots(tokens);
  for (int32_t t = 0; t < tokens; ++t) {
    pos[t] = static_cast<int32_t>(rng() % 5000);
    slots[t] = t == 4 ? -1 : (t * 5 + 3) % (num_blocks * c.block_size);  // distinct, one pad
  }
  std::vector<double> inv(c.rot_dim / 2);
  RopeInvFreq(10000.0f, c.rot_dim, inv.data());
  const TestKvPool layout(kv_heads, c.block_size, c.head_dim, c.dtype, num_blocks);
  // Separate kernels: RoPE on q and k in place, then the KV write.
  std::vector<float> ref = qkv;
  std::vector<uint8_t> ref_pool = layout.bytes;
  const PagedKvView rv = layout.View(ref_pool);
  const RopeTarget qt{ref.data(), width, q_heads};
  const RopeTarget kt{ref.data() + q_heads * c.head_dim, width, kv_heads};
  EmulateLaunch(dim3(tokens), dim3(kRopeThreads), 0, [&] {
    RopeKernel(c.style, pos.data(), inv.data(), c.rot_dim, c.head_dim, qt, kt);
  });
  EmulateLaunch(dim3(tokens), dim3(kWriteThreads), 0, [&] {
    WritePagedKvKernel<KvT>(rv, ref.data() + q_heads * c.head_dim,
                            ref.data() + (q_heads + kv_heads) * c.head_dim, width, slots.data());
  });
  // Fused.
  std::vector<float> got = qkv;
  std::vector<uint8_t> got_pool = layout.bytes;
  RopeKvArgs a;
  a.qkv = got.data();
  a.stride = width;
  a.num_heads = q_heads;
  a.num_tokens = tokens;
  a.positions = pos.data();
  a.slot_mapping = slots.data();
  a.inv_freq = inv.data();
  a.rot_dim = c.rot_dim;
  a.style = c.style;
  const PagedKvView gv = layout.View(got_pool);
  EmulateLaunch(dim3(tokens), dim3(kThreads), 0, [&] { RopeKvKernel<KvT>(a, gv); });
  EXPECT_EQ(got_pool, ref_pool);
  for (int32_t t = 0; t < tokens; ++t) {
    for (int64_t e = 0; e < width; ++e) {
      const bool q = e < int64_t{q_heads} * c.head_dim;
      ASSERT_EQ(got[t * width + e], q ? ref[t * width + e] : qkv[t * width + e])
          << "token " << t << " elem " << e;
    }
  }
}

TEST(EmulatedFusedDecodeTest, RopeKvSameBitsAsRopeThenWrite) {
  RunRopeKv<__nv_bfloat16>({RopeStyle::kNormal, 64, 64, 16, KvDtype::kBf16});
  RunRopeKv<__half>({RopeStyle::kNeox, 64, 64, 16, KvDtype::kF16});
  RunRopeKv<int8_t>({RopeStyle::kNeox, 128, 128, 16, KvDtype::kInt8});
  RunRopeKv<int8_t>({RopeStyle::kNormal, 128, 32, 7, KvDtype::kInt8});
  RunRopeKv<__nv_bfloat16>({RopeStyle::kNeox, 128, 64, 16, KvDtype::kBf16});
}

template <WeightType kType>
void RunGemvSwiGlu(GgmlType type, int64_t n, int64_t k, int32_t m) {
  const std::vector<uint8_t> bytes = testing::RandomGgufMatrix(type, n, k, 41);
  RepackedMatrix r;
  ASSERT_TRUE(RepackForGemv(kType, bytes.data(), RowBytes(type, k), n, k, &r));
  std::mt19937 rng(6);
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::vector<__nv_bfloat16> x(m * k);
  std::vector<float> xf(m * k);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = __float2bfloat16_rn(val(rng));
    xf[i] = __bfloat162float(x[i]);
  }
  GemvWeights w{kType, r.qs.data(), r.d.empty() ? nullptr : r.d.data(),
                r.m.empty() ? nullptr : r.m.data(), n, k};
  const int64_t ffn = n / 2;
  const unsigned grid_all = static_cast<unsigned>((n + kGemvWarps - 1) / kGemvWarps);
  const unsigned grid_half = static_cast<unsigned>((ffn + kGemvWarps - 1) / kGemvWarps);
  // Separate: GEMV into fp32, then SwiGLU to bf16.
  std::vector<float> gu(m * n);
  std::vector<__nv_bfloat16> want(m * ffn), got(m * ffn);
  EmulateLaunch(dim3(grid_all), dim3(kGemvWarps * 32), 0, [&] {
    GemvKernel<kType, false, false>(w, x.data(), k, GemvNorm{}, m, gu.data(), n, false, nullptr, 0,
                                    RopeKvArgs{}, PagedKvView{});
  });
  EmulateLaunch(dim3(1), dim3(kEltThreads), 0, [&] {
    GatedKernel<GatedAct::kSilu>(gu.data(), gu.data() + ffn, n, m, ffn, want.data(),
                                 ActDtype::kBf16, ffn);
  });
  EmulateLaunch(dim3(grid_half), dim3(kGemvWarps * 32), 0, [&] {
    GemvKernel<kType, true, false>(w, x.data(), k, GemvNorm{}, m, nullptr, 0, false,
                                   got.data(), ffn, RopeKvArgs{}, PagedKvView{});
  });
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(__bfloat16_as_ushort(got[i]), __bfloat16_as_ushort(want[i])) << i;
  }
  // And the GEMV itself is the reference GEMV (a sanity check of the emulated run).
  std::vector<float> ref(m * n);
  GemvReference(r, xf.data(), k, m, ref.data(), n);
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_NEAR(gu[i], ref[i], 2e-3 + 1e-4 * std::fabs(ref[i])) << i;
  }
}

TEST(EmulatedFusedDecodeTest, GemvSwiGluSameBitsAsGemvThenSwiGlu) {
  RunGemvSwiGlu<WeightType::kQ4_1>(GgmlType::kQ4_1, 96, 576, 3);
  RunGemvSwiGlu<WeightType::kQ8_0>(GgmlType::kQ8_0, 64, 256, 4);
  RunGemvSwiGlu<WeightType::kQ4_0>(GgmlType::kQ4_0, 50, 128, 1);
  RunGemvSwiGlu<WeightType::kQ4_K>(GgmlType::kQ4_K, 64, 512, 2);
  RunGemvSwiGlu<WeightType::kQ6_K>(GgmlType::kQ6_K, 34, 256, 3);
  RunGemvSwiGlu<WeightType::kQ5_0>(GgmlType::kQ5_0, 40, 160, 4);
}

// RmsNormKernel (bf16 rows) then GemvKernel<kSwiGlu, false> against GemvKernel<kSwiGlu,
// true> straight from the fp32 rows: the same bits. x rows ldx > k apart (the residual
// stream's stride may exceed the matrix's k only in tests; here it checks the indexing).
template <WeightType kType, bool kSwiGlu>
void RunNormedGemv(GgmlType type, int64_t n, int64_t k, int32_t m, bool accumulate,
                   float x_scale = 3.0f) {
  SCOPED_TRACE(::testing::Message() << "n " << n << " k " << k << " m " << m << " swiglu "
                                    << kSwiGlu << " accumulate " << accumulate
                                    << " x_scale " << x_scale);
  const std::vector<uint8_t> bytes = testing::RandomGgufMatrix(type, n, k, 43);
  RepackedMatrix r;
  ASSERT_TRUE(RepackForGemv(kType, bytes.data(), RowBytes(type, k), n, k, &r));
  const GemvWeights w{kType, r.qs.data(), r.d.empty() ? nullptr : r.d.data(),
                      r.m.empty() ? nullptr : r.m.data(), n, k};
  std::mt19937 rng(9);
  std::normal_distribution<float> val(0.0f, x_scale);
  std::uniform_real_distribution<float> wv(0.5f, 1.5f);
  const int64_t ldx = k + 32;
  std::vector<float> x(m * ldx), weight(k);
  for (float& v : x) v = val(rng);
  for (float& v : weight) v = wv(rng);
  const std::vector<float> x_before = x;
  const float eps = 1e-5f;
  const int64_t outputs = kSwiGlu ? n / 2 : n;
  const unsigned grid = static_cast<unsigned>((outputs + kGemvWarps - 1) / kGemvWarps);
  // Separate: RmsNorm into bf16 rows of k, then the GEMV from them.
  std::vector<__nv_bfloat16> h(m * k);
  EmulatedRmsNormBf16(x.data(), ldx, weight.data(), m, k, eps, h.data());
  std::vector<float> y_want(m * n, 0.25f), y_got(m * n, 0.25f);
  std::vector<__nv_bfloat16> act_want(m * outputs), act_got(m * outputs);
  EmulateLaunch(dim3(grid), dim3(kGemvWarps * 32), 0, [&] {
    GemvKernel<kType, kSwiGlu, false>(w, h.data(), k, GemvNorm{}, m, y_want.data(), n,
                                      accumulate, act_want.data(), outputs, RopeKvArgs{},
                                      PagedKvView{});
  });
  const GemvNorm norm{x.data(), ldx, weight.data(), eps};
  EmulateLaunch(dim3(grid), dim3(kGemvWarps * 32), GemvNormSmemBytes(k, m), [&] {
    GemvKernel<kType, kSwiGlu, true>(w, nullptr, 0, norm, m, y_got.data(), n, accumulate,
                                     act_got.data(), outputs, RopeKvArgs{}, PagedKvView{});
  });
  EXPECT_EQ(x, x_before) << "the residual rows are read, never written";
  if (kSwiGlu) {
    for (size_t i = 0; i < act_got.size(); ++i) {
      ASSERT_EQ(__bfloat16_as_ushort(act_got[i]), __bfloat16_as_ushort(act_want[i])) << i;
    }
  } else {
    for (size_t i = 0; i < y_got.size(); ++i) {
      ASSERT_EQ(y_got[i], y_want[i]) << i;  // incl. the accumulated 0.25 and no NaN
    }
  }
  // The normalized rows are the CPU twin's RMSNorm (double here) within bf16 rounding.
  for (int32_t row = 0; row < m; ++row) {
    double ss = 0;
    for (int64_t c = 0; c < k; ++c) ss += double{x[row * ldx + c]} * x[row * ldx + c];
    const double inv = 1.0 / std::sqrt(ss / k + eps);
    for (int64_t c = 0; c < k; ++c) {
      const double want = x[row * ldx + c] * inv * weight[c];
      ASSERT_NEAR(__bfloat162float(h[row * k + c]), want, 1e-2 * std::fabs(want) + 1e-6)
          << row << " " << c;
    }
  }
}

TEST(EmulatedFusedDecodeTest, NormedGemvSameBitsAsRmsNormThenGemv) {
  // SmolLM2's q/k/v (960 x 576) and a gate/up with the last block partly idle.
  RunNormedGemv<WeightType::kQ4_1, false>(GgmlType::kQ4_1, 960, 576, 1, false);
  RunNormedGemv<WeightType::kQ4_1, false>(GgmlType::kQ4_1, 100, 576, 4, true);
  RunNormedGemv<WeightType::kQ8_0, true>(GgmlType::kQ8_0, 2 * 44, 256, 3, false);
  RunNormedGemv<WeightType::kQ4_K, true>(GgmlType::kQ4_K, 2 * 40, 512, 2, false);
  RunNormedGemv<WeightType::kQ6_K, false>(GgmlType::kQ6_K, 34, 768, 4, false);
  // Rows whose mean square is near eps (1e-5): eps must enter as RmsNorm adds it.
  RunNormedGemv<WeightType::kQ4_1, true>(GgmlType::kQ4_1, 2 * 24, 576, 2, false, 3e-3f);
}

// A row count past the shared memory a block may take without an opt-in, or a missing
// input, is refused at the launch (no kernel runs): QuantGemvNormed's contract.
TEST(EmulatedFusedDecodeTest, NormedGemvFitsItsSharedMemory) {
  EXPECT_TRUE(GemvNormFits(576, 4));
  EXPECT_TRUE(GemvNormFits(4096, 4));
  EXPECT_TRUE(GemvNormFits(8192, 3));
  EXPECT_FALSE(GemvNormFits(8192, 4));
  EXPECT_FALSE(GemvNormFits(16384, 2));
}

// QuantGemvRopeKv's kernel against the GEMV into fp32 followed by RopeKvKernel (and, with
// kNorm, RmsNormKernel before both): q heads, kv heads, head_dim, rotary dims, m rows with
// one padding slot.
template <WeightType kType, typename KvT, bool kNorm>
void RunGemvRopeKv(GgmlType type, KvDtype dtype, int32_t head_dim, int32_t rot_dim, int32_t m) {
  SCOPED_TRACE(::testing::Message() << "type " << static_cast<int>(type) << " kv "
                                    << static_cast<int>(dtype) << " hd " << head_dim << " rot "
                                    << rot_dim << " m " << m << " norm " << kNorm);
  const int32_t q_heads = 4, kv_heads = 2, block_size = 16, num_blocks = 4;
  const int64_t n = int64_t{q_heads + 2 * kv_heads} * head_dim, k = 256;
  const std::vector<uint8_t> bytes = testing::RandomGgufMatrix(type, n, k, 47);
  RepackedMatrix r;
  ASSERT_TRUE(RepackForGemv(kType, bytes.data(), RowBytes(type, k), n, k, &r));
  const GemvWeights w{kType, r.qs.data(), r.d.empty() ? nullptr : r.d.data(),
                      r.m.empty() ? nullptr : r.m.data(), n, k};
  std::mt19937 rng(11);
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::vector<float> xf(m * k), nw(k);
  std::vector<__nv_bfloat16> xb(m * k);
  for (size_t i = 0; i < xf.size(); ++i) {
    xf[i] = 2.0f * val(rng);
    xb[i] = __float2bfloat16_rn(xf[i]);
  }
  for (float& v : nw) v = 1.0f + 0.25f * val(rng);
  std::vector<int32_t> pos(m);
  std::vector<int64_t> slots(m);
  for (int32_t t = 0; t < m; ++t) {
    pos[t] = static_cast<int32_t>(rng() % 9000);
    slots[t] = t == 1 ? -1 : (t * 7 + 2) % (num_blocks * block_size);
  }
  std::vector<double> inv(std::max(1, rot_dim / 2));
  RopeInvFreq(10000.0f, rot_dim, inv.data());
  const TestKvPool layout(kv_heads, block_size, head_dim, dtype, num_blocks);
  RopeKvArgs a;
  a.num_heads = q_heads;
  a.num_tokens = m;
  a.positions = pos.data();
  a.slot_mapping = slots.data();
  a.inv_freq = inv.data();
  a.rot_dim = rot_dim;
  a.style = RopeStyle::kNormal;
  const GemvNorm norm{xf.data(), k, nw.data(), 1e-5f};
  // Separate: [RmsNorm,] GEMV into fp32, RopeKvKernel on it.
  std::vector<__nv_bfloat16> h = xb;
  if (kNorm) EmulatedRmsNormBf16(xf.data(), k, nw.data(), m, k, 1e-5f, h.data());
  const unsigned grid = static_cast<unsigned>(n / kGemvWarps);
  std::vector<float> want(m * n, 0.5f), got(m * n, 0.5f);
  std::vector<uint8_t> want_pool = layout.bytes, got_pool = layout.bytes;
  EmulateLaunch(dim3(grid), dim3(kGemvWarps * 32), 0, [&] {
    GemvKernel<kType, false, false>(w, h.data(), k, GemvNorm{}, m, want.data(), n, false,
                                    nullptr, 0, RopeKvArgs{}, PagedKvView{});
  });
  RopeKvArgs ra = a;
  ra.qkv = want.data();
  ra.stride = n;
  const PagedKvView wv = layout.View(want_pool);
  EmulateLaunch(dim3(m), dim3(kThreads), 0, [&] { RopeKvKernel<KvT>(ra, wv); });
  // Folded.
  const PagedKvView gv = layout.View(got_pool);
  EmulateLaunch(dim3(grid), dim3(kGemvWarps * 32), kNorm ? GemvNormSmemBytes(k, m) : 0, [&] {
    GemvKernel<kType, false, kNorm, KvT>(w, kNorm ? nullptr : xb.data(), k, norm, m, got.data(),
                                         n, false, nullptr, 0, a, gv);
  });
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "qkv element " << i;
  EXPECT_EQ(got_pool, want_pool) << "KV pool bytes";
  EXPECT_NE(got_pool, std::vector<uint8_t>(got_pool.size(), 0x5a)) << "nothing was stored";
}

TEST(EmulatedFusedDecodeTest, RopeKvFoldedIntoTheQkvGemvSameBits) {
  RunGemvRopeKv<WeightType::kQ4_1, __nv_bfloat16, false>(GgmlType::kQ4_1, KvDtype::kBf16, 64,
                                                         64, 3);
  RunGemvRopeKv<WeightType::kQ4_1, __nv_bfloat16, true>(GgmlType::kQ4_1, KvDtype::kBf16, 64,
                                                        64, 4);
  RunGemvRopeKv<WeightType::kQ8_0, __half, true>(GgmlType::kQ8_0, KvDtype::kF16, 128, 64, 2);
  RunGemvRopeKv<WeightType::kQ8_0, int8_t, false>(GgmlType::kQ8_0, KvDtype::kInt8, 64, 32, 4);
  RunGemvRopeKv<WeightType::kQ4_K, int8_t, true>(GgmlType::kQ4_K, KvDtype::kInt8, 128, 128, 1);
}

// WritePagedKvKernel (the reference the fused kernels are compared with above) against the
// host twin of the pool (testing/kv_reference.h: plain C++ addressing), so that the shared
// group addressing (kv_store.cuh's KvGroupIndex) is checked on its own: same data and scale
// bytes for every KV type, two heads, a block size that is not a power of two, a padding slot.
TEST(EmulatedFusedDecodeTest, WritePagedKvIsTheHostTwinsLayout) {
  for (KvDtype dtype : {KvDtype::kBf16, KvDtype::kF16, KvDtype::kInt8}) {
    SCOPED_TRACE(KvDtypeName(dtype));
    const int32_t kv_heads = 2, block_size = 7, head_dim = 64, num_blocks = 3, tokens = 5;
    testing::HostPagedKv want(dtype, num_blocks, block_size, kv_heads, head_dim);
    testing::HostPagedKv got(dtype, num_blocks, block_size, kv_heads, head_dim);
    std::mt19937 rng(13);
    std::normal_distribution<float> val(0.0f, 1.5f);
    const int64_t width = int64_t{kv_heads} * head_dim;
    std::vector<float> k(tokens * width), v(tokens * width);
    for (float& x : k) x = val(rng);
    for (float& x : v) x = val(rng);
    const std::vector<int64_t> slots = {20, 3, -1, 9, 14};
    for (int32_t t = 0; t < tokens; ++t) {
      if (slots[t] >= 0) want.Write(k.data() + t * width, v.data() + t * width, slots[t]);
    }
    const PagedKvView view = got.View(got.data().data(), got.scales().data());
    const auto kernel = dtype == KvDtype::kInt8   ? WritePagedKvKernel<int8_t>
                        : dtype == KvDtype::kF16 ? WritePagedKvKernel<__half>
                                                 : WritePagedKvKernel<__nv_bfloat16>;
    EmulateLaunch(dim3(tokens), dim3(kWriteThreads), 0,
                  [&] { kernel(view, k.data(), v.data(), width, slots.data()); });
    EXPECT_EQ(got.data(), want.data());
    EXPECT_EQ(got.scales(), want.scales());
  }
}

}  // namespace
}  // namespace weft::kernels::cuda

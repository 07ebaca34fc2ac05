#include "kernels/cpu/int8_matmul.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/ggml_types.h"
#include "common/testing/ggml_quant_ref.h"
#include "common/tokenizer_test_util.h"
#include "gtest/gtest.h"
#include "kernels/cpu/quant_matmul.h"
#include "kernels/cpu/testing/random_weights.h"
#include "kernels/cpu/int8_matmul_isa.h"

namespace weft::kernels {
namespace {

const GgmlType kTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0,
                           GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ4_K,
                           GgmlType::kQ5_K, GgmlType::kQ6_K};

// A row length near `k` that the type takes (K-quants: whole 256-weight super-blocks).
int64_t RowLength(GgmlType type, int64_t k) {
  const int64_t block = GetGgmlTypeTraits(static_cast<uint32_t>(type))->block_size;
  return block == 32 ? k : (k + 255) / 256 * 256;
}
const Int8Isa kIsas[] = {Int8Isa::kScalar, Int8Isa::kAvx2, Int8Isa::kAvx512Vnni, Int8Isa::kAmx};

// Owns the buffers of a Q8Rows.
struct Q8Buffers {
  std::vector<int8_t> q;
  std::vector<float> d, ds;
  std::vector<int32_t> qsum;
  Q8Rows rows;

  Q8Buffers(int64_t m, int64_t k) : q(m * k), d(m * k / 32), ds(m * k / 32), qsum(m * k / 32) {
    rows = Q8Rows{k, q.data(), d.data(), ds.data(), qsum.data()};
  }
  // Rows [first, first + n) as a Q8Rows of their own.
  Q8Rows Sub(int64_t first) const {
    const int64_t nb = rows.k / 32;
    return Q8Rows{rows.k, rows.q + first * rows.k, rows.d + first * nb, rows.ds + first * nb,
                  rows.qsum + first * nb};
  }
};

struct Problem {
  GgmlType type;
  int64_t n, k, m, ldx;
  std::vector<uint8_t> raw;
  std::vector<uint8_t> packed;
  std::vector<float> x;
};

Problem Make(GgmlType type, int64_t n, int64_t k, int64_t m, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> v(-2.0f, 2.0f);
  Problem p{type, n, k, m, k + 7, testing::RandomQuantRows(type, n, k, rng), {}, {}};
  const int64_t rb = RowBytes(type, k);
  p.packed.resize(Int8PackedBytes(type, n, k));
  PackInt8Weights(QuantMatrix{type, p.raw.data(), n, k, rb}, p.packed.data());
  p.x.resize(m * p.ldx);
  for (float& f : p.x) f = v(rng);
  // Blocks that stress the quantizer: all zero, one outlier, tiny values.
  if (m > 2 && k >= 96) {
    for (int c = 0; c < 32; ++c) p.x[1 * p.ldx + c] = 0;
    p.x[2 * p.ldx + 40] = 300.0f;
    for (int c = 64; c < 96; ++c) p.x[0 * p.ldx + c] *= 1e-30f;
  }
  return p;
}

Int8PackedMatrix Packed(const Problem& p) { return {p.type, p.packed.data(), p.n, p.k}; }

std::vector<float> RunMatmul(Int8Isa isa, const Problem& p, const Q8Rows& x, int64_t m, int splits) {
  std::vector<float> y(m * p.n, NAN);
  for (int s = 0; s < splits; ++s) {
    Int8Matmul(isa, Packed(p), x, m, y.data(), p.n, p.n * s / splits, p.n * (s + 1) / splits);
  }
  return y;
}

void ExpectBitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t ua, ub;
    std::memcpy(&ua, &a[i], 4);
    std::memcpy(&ub, &b[i], 4);
    ASSERT_EQ(ua, ub) << "element " << i << ": " << a[i] << " vs " << b[i];
  }
}

TEST(QuantizeRowsQ8Test, HandComputedBlock) {
  std::vector<float> x(32);
  for (int c = 0; c < 32; ++c) x[c] = (c - 16) * 0.5f;  // amax 8 at c = 0
  Q8Buffers q(1, 32);
  QuantizeRowsQ8(x.data(), 32, 0, 1, &q.rows);
  EXPECT_FLOAT_EQ(q.d[0], 8.0f / 127.0f);
  int32_t sum = 0;
  for (int c = 0; c < 32; ++c) {
    // x * 127/8 = (c - 16) * 7.9375, rounded to nearest even.
    EXPECT_EQ(q.q[c], static_cast<int>(std::nearbyint((c - 16) * 0.5f * (127.0f / 8.0f)))) << c;
    sum += q.q[c];
  }
  EXPECT_EQ(q.q[0], -127);
  EXPECT_EQ(q.qsum[0], sum);
  EXPECT_FLOAT_EQ(q.ds[0], q.d[0] * sum);
}

TEST(QuantizeRowsQ8Test, DispatchedEqualsScalarBitwise) {
  if (!Int8IsaSupported(Int8Isa::kAvx512Vnni)) {
    GTEST_SKIP() << "QuantizeRowsQ8 dispatches to the scalar code on this CPU (no AVX-512 VNNI)";
  }
  const Problem p = Make(GgmlType::kQ4_1, 16, 256, 9, 3);
  Q8Buffers a(p.m, p.k), b(p.m, p.k);
  QuantizeRowsQ8(p.x.data(), p.ldx, 0, p.m, &a.rows);
  scalar::QuantizeRowsQ8(p.x.data(), p.ldx, 0, p.m, &b.rows);
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.qsum, b.qsum);
  for (size_t i = 0; i < a.d.size(); ++i) {
    EXPECT_EQ(a.d[i], b.d[i]);
    EXPECT_EQ(a.ds[i], b.ds[i]);
  }
  for (int c = 0; c < 32; ++c) EXPECT_EQ(a.q[1 * p.k + c], 0);  // the zero block
}

// Every ISA path gives the scalar reference's bits, for any number of rows and any
// column split (aligned to panels or not), including a partial last panel.
// m = 37 gives the AMX path two whole 16-row tiles and 5 rows for its VNNI remainder.
class Int8IsaTest : public ::testing::TestWithParam<Int8Isa> {};

TEST_P(Int8IsaTest, EqualsScalarBitwise) {
  const Int8Isa isa = GetParam();
  if (!Int8IsaSupported(isa)) GTEST_SKIP() << Int8IsaName(isa) << ": this CPU cannot run it";
  for (GgmlType type : kTypes) {
    for (auto [n, m] : {std::pair<int64_t, int64_t>{45, 11}, {192, 11}, {45, 37}, {80, 16}}) {
      SCOPED_TRACE(GgmlTypeName(static_cast<uint32_t>(type)) + " n=" + std::to_string(n) +
                   " m=" + std::to_string(m));
      const Problem p = Make(type, n, RowLength(type, 288), m, 7);
      Q8Buffers q(p.m, p.k);
      QuantizeRowsQ8(p.x.data(), p.ldx, 0, p.m, &q.rows);
      const std::vector<float> want = RunMatmul(Int8Isa::kScalar, p, q.rows, p.m, 1);
      for (int splits : {1, 2, 5}) ExpectBitwiseEqual(RunMatmul(isa, p, q.rows, p.m, splits), want);
    }
  }
}

// Every ISA but the scalar reference itself, each its own case (skipped, counted as such,
// where this CPU cannot run it).
INSTANTIATE_TEST_SUITE_P(Isas, Int8IsaTest,
                         ::testing::Values(Int8Isa::kAvx2, Int8Isa::kAvx512Vnni, Int8Isa::kAmx),
                         [](const ::testing::TestParamInfo<Int8Isa>& info) {
                           return std::string(Int8IsaName(info.param));
                         });

// A row's outputs do not depend on the other rows of the call (the GEMV and GEMM tiles,
// and AMX tiles vs the VNNI remainder, give the same bits).
TEST(Int8MatmulTest, BatchInvariant) {
  for (GgmlType type : kTypes) {
    const Problem p = Make(type, 64, RowLength(type, 576), 35, 11);
    Q8Buffers q(p.m, p.k);
    QuantizeRowsQ8(p.x.data(), p.ldx, 0, p.m, &q.rows);
    for (Int8Isa isa : kIsas) {
      if (!Int8IsaSupported(isa)) continue;
      SCOPED_TRACE(Int8IsaName(isa));
      const std::vector<float> all = RunMatmul(isa, p, q.rows, p.m, 2);
      for (int64_t i = 0; i < p.m; i += 3) {
        const std::vector<float> one = RunMatmul(isa, p, q.Sub(i), 1, 3);
        ExpectBitwiseEqual(one, std::vector<float>(all.begin() + i * p.n, all.begin() + (i + 1) * p.n));
      }
    }
  }
}

// The AMX path's tiles at a larger size than the tests above (several panels per thread
// split, many blocks), bitwise against the scalar reference.
TEST(Int8MatmulTest, AmxTilesEqualScalarAtModelShapes) {
  if (!Int8IsaSupported(Int8Isa::kAmx)) {
    GTEST_SKIP() << "no usable AMX int8 on this CPU/OS";
  }
  for (GgmlType type : kTypes) {
    SCOPED_TRACE(GgmlTypeName(static_cast<uint32_t>(type)));
    const Problem p = Make(type, 96, 1536, 48, 17);
    Q8Buffers q(p.m, p.k);
    QuantizeRowsQ8(p.x.data(), p.ldx, 0, p.m, &q.rows);
    ExpectBitwiseEqual(RunMatmul(Int8Isa::kAmx, p, q.rows, p.m, 3),
                       RunMatmul(Int8Isa::kScalar, p, q.rows, p.m, 1));
  }
}

// Against the exact product of the dequantized weights with the unquantized
// activations: the error is what rounding activations to int8 allows,
// |err| <= sum_b (d_x[b] / 2) * sum_c |w_c| (plus fp32 rounding).
TEST(Int8MatmulTest, WithinTheActivationQuantizationBound) {
  for (GgmlType type : kTypes) {
    SCOPED_TRACE(GgmlTypeName(static_cast<uint32_t>(type)));
    const Problem p = Make(type, 40, RowLength(type, 320), 5, 13);
    Q8Buffers q(p.m, p.k);
    QuantizeRowsQ8(p.x.data(), p.ldx, 0, p.m, &q.rows);
    const std::vector<float> y = RunMatmul(Int8Isa::kScalar, p, q.rows, p.m, 1);
    std::vector<float> row(p.k);
    for (int64_t j = 0; j < p.n; ++j) {
      ASSERT_TRUE(DequantizeRow(type, p.raw.data() + j * RowBytes(type, p.k), row.data(), p.k).ok());
      for (int64_t i = 0; i < p.m; ++i) {
        double exact = 0, mag = 0, bound = 0;
        for (int64_t c = 0; c < p.k; ++c) {
          exact += double{row[c]} * p.x[i * p.ldx + c];
          mag += std::fabs(double{row[c]} * p.x[i * p.ldx + c]);
          bound += std::fabs(double{row[c]}) * q.d[i * (p.k / 32) + c / 32] / 2;
        }
        ASSERT_NEAR(y[i * p.n + j], exact, bound + 1e-5 * mag + 1e-6) << "row " << j << " x " << i;
      }
    }
  }
}

// On tensors quantized by llama.cpp's ggml (tests/testdata/ggml_quant_ref.bin), every
// ISA against ggml's own quantized dot products (vec_dot: activations in Q8_0 / Q8_1 /
// Q8_K) and against the exact product: each side's error is what rounding its
// activations allows (Weft: blocks of 32; ggml's Q8_K: blocks of 256), plus fp32 /
// fp16-scale rounding. The fp32 reference kernel is exact up to fp32 rounding.
TEST(Int8MatmulTest, AgreesWithLlamaCppOnItsQuantizedTensors) {
  ::weft::testing::GgmlQuantRef ref;
  std::string error;
  ASSERT_TRUE(::weft::testing::ReadGgmlQuantRef(::weft::testing::TestDataPath("ggml_quant_ref.bin"), &ref,
                                        &error))
      << error;
  ASSERT_EQ(ref.cases.size(), 8u);
  for (const ::weft::testing::GgmlQuantCase& c : ref.cases) {
    const auto type = static_cast<GgmlType>(c.type);
    SCOPED_TRACE(GgmlTypeName(c.type));
    ASSERT_TRUE(Int8MatmulSupported(type, c.k));
    const QuantMatrix raw{type, c.bytes.data(), c.n, c.k, RowBytes(type, c.k)};
    std::vector<uint8_t> packed(Int8PackedBytes(type, c.n, c.k));
    PackInt8Weights(raw, packed.data());
    const Int8PackedMatrix w{type, packed.data(), c.n, c.k};
    Q8Buffers q(c.m, c.k);
    QuantizeRowsQ8(c.x.data(), c.k, 0, c.m, &q.rows);
    std::vector<float> fp32(c.m * c.n);
    MatmulReference(raw, c.x.data(), c.k, c.m, fp32.data(), c.n, 0, c.n);
    for (Int8Isa isa : kIsas) {
      if (!Int8IsaSupported(isa)) continue;
      SCOPED_TRACE(Int8IsaName(isa));
      std::vector<float> y(c.m * c.n, NAN);
      Int8Matmul(isa, w, q.rows, c.m, y.data(), c.n, 0, c.n);
      for (int64_t i = 0; i < c.m; ++i) {
        for (int64_t j = 0; j < c.n; ++j) {
          double exact = 0, mag = 0, ours = 0, theirs = 0;
          for (int64_t e = 0; e < c.k; ++e) {
            const double wv = c.dequant[j * c.k + e], xv = c.x[i * c.k + e];
            exact += wv * xv;
            mag += std::fabs(wv * xv);
            ours += std::fabs(wv) * q.d[i * (c.k / 32) + e / 32] / 2;
            float amax = 0;  // ggml's Q8_K block of 256 (or Q8_0 / Q8_1 of 32)
            const int64_t blk = type == GgmlType::kQ4_K || type == GgmlType::kQ5_K ||
                                type == GgmlType::kQ6_K ? 256 : 32;
            for (int64_t t = e / blk * blk; t < (e / blk + 1) * blk; ++t) {
              amax = std::max(amax, std::fabs(c.x[i * c.k + t]));
            }
            theirs += std::fabs(wv) * amax / 127 / 2;
          }
          const float got = y[i * c.n + j], llama = c.y[i * c.n + j];
          ASSERT_NEAR(got, exact, ours + 1e-5 * mag + 1e-6) << i << "," << j;
          ASSERT_NEAR(got, llama, ours + theirs + 2e-3 * mag + 1e-6) << i << "," << j;
          ASSERT_NEAR(fp32[i * c.n + j], exact, 1e-5 * mag + 1e-6) << i << "," << j;
        }
      }
    }
  }
}

// The K formats keep about the file's bytes per weight (what a decode step streams).
TEST(Int8MatmulTest, KFormatsKeepTheFilesBytesPerWeight) {
  for (GgmlType type : kTypes) {
    if (!IsInt8KFormat(type)) continue;
    SCOPED_TRACE(GgmlTypeName(static_cast<uint32_t>(type)));
    const int64_t n = 64, k = 1536;
    const double file = static_cast<double>(n * RowBytes(type, k));
    const double packed = static_cast<double>(Int8PackedBytes(type, n, k));
    EXPECT_GE(packed, file);
    EXPECT_LE(packed, 1.03 * file);
  }
}

// No AVX-512 VNNI / AMX code reads the K formats: those ISAs hand them to AVX2.
TEST(Int8MatmulTest, KFormatsRunOnAvx2WhereAvx512IsAskedFor) {
  for (GgmlType type : kTypes) {
    SCOPED_TRACE(GgmlTypeName(static_cast<uint32_t>(type)));
    for (Int8Isa isa : kIsas) {
      const Int8Isa want = IsInt8KFormat(type) && (isa == Int8Isa::kAvx512Vnni || isa == Int8Isa::kAmx)
                               ? Int8Isa::kAvx2
                               : isa;
      EXPECT_EQ(Int8IsaFor(isa, type), want) << Int8IsaName(isa);
    }
  }
  EXPECT_FALSE(Int8MatmulSupported(GgmlType::kQ4_K, 288));
  EXPECT_TRUE(Int8MatmulSupported(GgmlType::kQ4_K, 512));
  EXPECT_TRUE(Int8MatmulSupported(GgmlType::kQ5_0, 288));
  EXPECT_FALSE(Int8MatmulSupported(GgmlType::kQ2_K, 512));
}

}  // namespace
}  // namespace weft::kernels

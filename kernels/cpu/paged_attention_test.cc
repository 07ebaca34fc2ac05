#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace weft::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Shape {
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t block_size;
};

// One layer's pool of `dtype` laid out as paged_attention.h says, poisoned (NaN for fp32,
// all-ones bytes otherwise: NaN halves, NaN int8 scales), plus the K, V and Q rows of a
// few sequences written through random block tables.
class Fixture {
 public:
  Fixture(const Shape& shape, const std::vector<int32_t>& lengths, uint32_t seed,
          KvDtype dtype = KvDtype::kF32)
      : shape_(shape), lengths_(lengths), rng_(seed) {
    const int32_t bs = shape.block_size;
    int32_t needed = 0;
    for (int32_t len : lengths) needed += (len + bs - 1) / bs;
    num_blocks_ = needed + 5;  // some blocks stay unused (and poisoned)
    const int64_t tile = KvTileBytes(dtype, shape.head_dim, bs);
    const int64_t half = int64_t{shape.num_kv_heads} * tile;
    pool_.assign(num_blocks_ * 2 * half, 0xFF);
    if (dtype == KvDtype::kF32) {
      std::fill_n(reinterpret_cast<float*>(pool_.data()), pool_.size() / 4, kNaN);
    }
    kv_.dtype = dtype;
    kv_.k = pool_.data();
    kv_.v = pool_.data() + half;
    kv_.block_stride = 2 * half;
    kv_.head_stride = tile;
    kv_.block_size = bs;
    kv_.num_kv_heads = shape.num_kv_heads;
    kv_.head_dim = shape.head_dim;
    std::vector<int32_t> ids(num_blocks_);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng_);  // ragged, non-contiguous tables
    size_t next = 0;
    std::normal_distribution<float> val(0.0f, 1.0f);
    for (int32_t len : lengths) {
      std::vector<int32_t> table;
      for (int32_t b = 0; b < (len + bs - 1) / bs; ++b) table.push_back(ids[next++]);
      tables_.push_back(table);
      const int32_t kv_width = shape.num_kv_heads * shape.head_dim;
      std::vector<float> k(len * kv_width), v(len * kv_width);
      std::vector<float> q(len * shape.num_heads * shape.head_dim);
      for (float& x : k) x = val(rng_);
      for (float& x : v) x = val(rng_);
      for (float& x : q) x = val(rng_);
      ks_.push_back(k);
      vs_.push_back(v);
      qs_.push_back(q);
      // What the pool holds (the naive reference attends to these).
      std::vector<float> k_rt(k.size()), v_rt(v.size());
      const int32_t hd = shape.head_dim;
      for (size_t i = 0; i < k.size(); ++i) {
        const size_t head = i / hd * hd;
        k_rt[i] = KvRoundTrip(dtype, k[i], k.data() + head, hd);
        v_rt[i] = KvRoundTrip(dtype, v[i], v.data() + head, hd);
      }
      ks_rt_.push_back(k_rt);
      vs_rt_.push_back(v_rt);
    }
    // Write all sequences' tokens as one flattened batch.
    std::vector<float> k_all, v_all;
    std::vector<int64_t> slots;
    for (size_t s = 0; s < lengths.size(); ++s) {
      k_all.insert(k_all.end(), ks_[s].begin(), ks_[s].end());
      v_all.insert(v_all.end(), vs_[s].begin(), vs_[s].end());
      for (int32_t p = 0; p < lengths[s]; ++p) {
        slots.push_back(int64_t{tables_[s][p / bs]} * bs + p % bs);
      }
    }
    WritePagedKv(kv_, k_all.data(), v_all.data(), shape.num_kv_heads * shape.head_dim,
                 slots.data(), 0, static_cast<int64_t>(slots.size()));
  }

  AttentionParams Params(int32_t window = 0) const {
    AttentionParams p;
    p.num_heads = shape_.num_heads;
    p.scale = 1.0f / std::sqrt(static_cast<float>(shape_.head_dim));
    p.kv_head_begin = 0;
    p.kv_head_end = shape_.num_kv_heads;
    p.window = window;
    return p;
  }

  // Overwrites block b of sequence s (every kv head's K and V) with NaN / all-ones bytes:
  // a kernel that reads it produces NaN.
  void PoisonBlock(size_t s, int32_t b) {
    const int64_t block = tables_[s][b];
    for (int32_t h = 0; h < shape_.num_kv_heads; ++h) {
      const int64_t bytes = KvTileBytes(kv_.dtype, shape_.head_dim, shape_.block_size);
      for (uint8_t* tile : {kv_.KTile(block, h), kv_.VTile(block, h)}) {
        if (kv_.dtype == KvDtype::kF32) {
          std::fill_n(reinterpret_cast<float*>(tile), bytes / 4, kNaN);
        } else {
          std::fill_n(tile, bytes, 0xFF);
        }
      }
    }
  }
  int32_t q_width() const { return shape_.num_heads * shape_.head_dim; }

  // Naive causal attention of sequence s's query token t, in double (keys
  // t - window + 1 .. t with a window).
  std::vector<double> Naive(size_t s, int32_t t, int32_t window = 0) const {
    const int32_t lo = window > 0 ? std::max(0, t - window + 1) : 0;
    const int32_t hd = shape_.head_dim;
    const int32_t group = shape_.num_heads / shape_.num_kv_heads;
    const int32_t kvw = shape_.num_kv_heads * hd;
    std::vector<double> out(q_width());
    for (int32_t h = 0; h < shape_.num_heads; ++h) {
      const int32_t kh = h / group;
      std::vector<double> sc(t + 1, 0.0);
      double mx = -1e300;
      for (int32_t j = lo; j <= t; ++j) {
        double dot = 0;
        for (int32_t d = 0; d < hd; ++d) {
          dot += double{qs_[s][t * q_width() + h * hd + d]} * ks_rt_[s][j * kvw + kh * hd + d];
        }
        sc[j] = dot / std::sqrt(double(hd));
        mx = std::max(mx, sc[j]);
      }
      double sum = 0;
      for (int32_t j = lo; j <= t; ++j) sum += (sc[j] = std::exp(sc[j] - mx));
      for (int32_t d = 0; d < hd; ++d) {
        double acc = 0;
        for (int32_t j = lo; j <= t; ++j) acc += sc[j] * vs_rt_[s][j * kvw + kh * hd + d];
        out[h * hd + d] = acc / sum;
      }
    }
    return out;
  }

  std::vector<float> Prefill(AttentionImpl impl, size_t s, int32_t start, int32_t count,
                             int32_t window = 0) const {
    std::vector<float> out(count * q_width(), kNaN);
    PagedPrefillAttention(impl, qs_[s].data() + start * q_width(), q_width(), start, 0, count,
                          kv_, tables_[s].data(), Params(window), out.data(), q_width());
    return out;
  }

  std::vector<float> Decode(AttentionImpl impl, size_t s, int32_t t, int32_t window = 0) const {
    std::vector<float> out(q_width(), kNaN);
    PagedDecodeAttention(impl, qs_[s].data() + t * q_width(), kv_, tables_[s].data(), t + 1,
                         Params(window), out.data());
    return out;
  }

  const Shape shape_;
  const std::vector<int32_t> lengths_;
  std::mt19937 rng_;
  int32_t num_blocks_ = 0;
  std::vector<uint8_t> pool_;
  PagedKvLayer kv_;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<std::vector<float>> ks_, vs_, qs_;
  std::vector<std::vector<float>> ks_rt_, vs_rt_;  // as stored in the pool
};

const KvDtype kDtypes[] = {KvDtype::kF32, KvDtype::kF16, KvDtype::kBf16, KvDtype::kInt8};

std::vector<AttentionImpl> Impls(const Shape& shape) {
  std::vector<AttentionImpl> out = {AttentionImpl::kReference};
  for (AttentionImpl impl : {AttentionImpl::kAvx512, AttentionImpl::kAvx512Vnni}) {
    if (AttentionSupported(impl, shape.block_size, shape.head_dim)) out.push_back(impl);
  }
  return out;
}

const Shape kShapes[] = {
    {6, 2, 32, 16},   // GQA 3:1
    {9, 3, 64, 16},   // the default model's shape
    {4, 4, 16, 32},   // MHA, larger blocks
    {8, 1, 48, 16},   // MQA, head_dim not a multiple of 64
    {3, 3, 8, 5},     // odd sizes: reference only
    {4, 1, 256, 16},  // Gemma 3 270M: head_dim 256, MQA 4:1
};
const std::vector<int32_t> kLengths = {1, 5, 16, 17, 40, 63};

TEST(PagedAttentionTest, WriteFollowsTheDocumentedLayout) {
  const Shape shape = {6, 2, 32, 16};
  const Fixture f(shape, kLengths, 7);
  const int32_t hd = shape.head_dim, bs = shape.block_size;
  for (size_t s = 0; s < kLengths.size(); ++s) {
    for (int32_t p = 0; p < kLengths[s]; ++p) {
      const int64_t block = f.tables_[s][p / bs];
      const int32_t slot = p % bs;
      for (int32_t h = 0; h < shape.num_kv_heads; ++h) {
        for (int32_t d = 0; d < hd; ++d) {
          const float* kt = reinterpret_cast<const float*>(f.kv_.KTile(block, h));
          const float* vt = reinterpret_cast<const float*>(f.kv_.VTile(block, h));
          ASSERT_EQ(kt[d * bs + slot], f.ks_[s][p * 2 * hd + h * hd + d]);
          ASSERT_EQ(vt[slot * hd + d], f.vs_[s][p * 2 * hd + h * hd + d]);
        }
      }
    }
  }
}

TEST(PagedAttentionTest, PrefillMatchesNaiveLoops) {
  for (KvDtype dtype : kDtypes) {
  for (const Shape& shape : kShapes) {
    if (!KvDtypeSupported(dtype, shape.head_dim)) continue;
    const Fixture f(shape, kLengths, 11, dtype);
    for (AttentionImpl impl : Impls(shape)) {
      SCOPED_TRACE(std::string(AttentionImplName(impl)) + " " + KvDtypeName(dtype));
      // Integer products round q and p to 8 bits (|out| <= max |v| ~ 3 here).
      const double tolerance =
          impl == AttentionImpl::kAvx512Vnni && dtype == KvDtype::kInt8 ? 3e-2 : 2e-5;
      double max_err = 0;
      for (size_t s = 0; s < kLengths.size(); ++s) {
        const std::vector<float> out = f.Prefill(impl, s, 0, kLengths[s]);
        for (int32_t t = 0; t < kLengths[s]; ++t) {
          const std::vector<double> want = f.Naive(s, t);
          for (int32_t i = 0; i < f.q_width(); ++i) {
            max_err = std::max(max_err, std::fabs(out[t * f.q_width() + i] - want[i]));
            ASSERT_NEAR(out[t * f.q_width() + i], want[i], tolerance)
                << "heads " << shape.num_heads << " seq " << s << " token " << t << " i " << i;
          }
        }
      }
      std::printf("%s %s heads %d/%d head_dim %d: max |out - naive| %.3g\n", AttentionImplName(impl),
                  KvDtypeName(dtype), shape.num_heads, shape.num_kv_heads, shape.head_dim, max_err);
    }
  }
  }
}

// Decode of position t, one-shot prefill and chunked prefill (chunks of 7) give the same
// bits: the NaN-poisoned unused slots and blocks are never read into the result.
TEST(PagedAttentionTest, DecodeAndChunkedPrefillAreBitwiseOneShot) {
  for (KvDtype dtype : kDtypes) {
  for (const Shape& shape : kShapes) {
    if (!KvDtypeSupported(dtype, shape.head_dim)) continue;
    const Fixture f(shape, kLengths, 13, dtype);
    for (AttentionImpl impl : Impls(shape)) {
      SCOPED_TRACE(std::string(AttentionImplName(impl)) + " " + KvDtypeName(dtype));
      for (size_t s = 0; s < kLengths.size(); ++s) {
        const std::vector<float> one_shot = f.Prefill(impl, s, 0, kLengths[s]);
        for (int32_t start = 0; start < kLengths[s]; start += 7) {
          const int32_t count = std::min(7, kLengths[s] - start);
          const std::vector<float> chunk = f.Prefill(impl, s, start, count);
          for (int32_t i = 0; i < count * f.q_width(); ++i) {
            ASSERT_EQ(chunk[i], one_shot[start * f.q_width() + i]) << "seq " << s;
          }
        }
        for (int32_t t = 0; t < kLengths[s]; ++t) {
          const std::vector<float> dec = f.Decode(impl, s, t);
          for (int32_t i = 0; i < f.q_width(); ++i) {
            ASSERT_FALSE(std::isnan(dec[i]));
            ASSERT_EQ(dec[i], one_shot[t * f.q_width() + i]) << "seq " << s << " token " << t;
          }
        }
      }
    }
  }
  }
}

// Splitting work over kv heads and query ranges (as threads do) changes nothing.
TEST(PagedAttentionTest, HeadAndQuerySplitsAreBitwiseEqual) {
  const Shape shape = {9, 3, 64, 16};
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kInt8}) {
  const Fixture f(shape, {50}, 17, dtype);
  for (AttentionImpl impl : Impls(shape)) {
    const std::vector<float> whole = f.Prefill(impl, 0, 0, 50);
    std::vector<float> parts(whole.size(), kNaN);
    for (int32_t h = 0; h < 3; ++h) {
      for (int32_t q0 : {0, 13, 31}) {
        const int32_t q1 = q0 == 0 ? 13 : (q0 == 13 ? 31 : 50);
        AttentionParams p = f.Params();
        p.kv_head_begin = h;
        p.kv_head_end = h + 1;
        if (q0 == 13) {  // the query heads of the group one by one
          for (int32_t g = 0; g < 3; ++g) {
            p.group_begin = g;
            p.group_end = g + 1;
            PagedPrefillAttention(impl, f.qs_[0].data(), f.q_width(), 0, q0, q1, f.kv_,
                                  f.tables_[0].data(), p, parts.data(), f.q_width());
          }
          continue;
        }
        PagedPrefillAttention(impl, f.qs_[0].data(), f.q_width(), 0, q0, q1, f.kv_,
                              f.tables_[0].data(), p, parts.data(), f.q_width());
      }
    }
    for (size_t i = 0; i < whole.size(); ++i) ASSERT_EQ(parts[i], whole[i]);
    // Decode per query head too.
    const std::vector<float> dec = f.Decode(impl, 0, 41);
    std::vector<float> split(dec.size(), kNaN);
    for (int32_t h = 0; h < 3; ++h) {
      for (int32_t g = 0; g < 3; ++g) {
        AttentionParams p = f.Params();
        p.kv_head_begin = h;
        p.kv_head_end = h + 1;
        p.group_begin = g;
        p.group_end = g + 1;
        PagedDecodeAttention(impl, f.qs_[0].data() + 41 * f.q_width(), f.kv_,
                             f.tables_[0].data(), 42, p, split.data());
      }
    }
    for (size_t i = 0; i < dec.size(); ++i) ASSERT_EQ(split[i], dec[i]);
  }
  }
}

// Sliding windows (keys p - W + 1 .. p) of sizes around the block size, against naive
// loops over the same keys, on every implementation (rows the window cuts run the
// portable kernel there) and KV type.
const int32_t kWindows[] = {1, 5, 16, 17, 33};

TEST(PagedAttentionTest, WindowedPrefillMatchesNaiveLoops) {
  for (KvDtype dtype : kDtypes) {
    for (const Shape& shape : {Shape{6, 2, 32, 16}, Shape{4, 1, 256, 16}, Shape{3, 3, 8, 5}}) {
      if (!KvDtypeSupported(dtype, shape.head_dim)) continue;
      const Fixture f(shape, kLengths, 19, dtype);
      for (AttentionImpl impl : Impls(shape)) {
        for (int32_t w : kWindows) {
          SCOPED_TRACE(std::string(AttentionImplName(impl)) + " " + KvDtypeName(dtype) +
                       " window " + std::to_string(w) + " head_dim " +
                       std::to_string(shape.head_dim));
          const double tolerance =
              impl == AttentionImpl::kAvx512Vnni && dtype == KvDtype::kInt8 ? 3e-2 : 2e-5;
          for (size_t s = 0; s < kLengths.size(); ++s) {
            const std::vector<float> out = f.Prefill(impl, s, 0, kLengths[s], w);
            for (int32_t t = 0; t < kLengths[s]; ++t) {
              const std::vector<double> want = f.Naive(s, t, w);
              for (int32_t i = 0; i < f.q_width(); ++i) {
                ASSERT_NEAR(out[t * f.q_width() + i], want[i], tolerance)
                    << "seq " << s << " token " << t << " i " << i;
              }
            }
          }
        }
      }
    }
  }
}

// With a window, decode, one-shot prefill and chunked prefill (chunks of 7 and 3) give the
// same bits; blocks wholly before every query's window are never read (poisoned here).
// Rows whose window does not cut their context equal the unwindowed kernel's bits, rows
// it cuts the portable kernel's (on every implementation).
TEST(PagedAttentionTest, WindowedDecodeAndChunkedPrefillAreBitwiseOneShot) {
  for (KvDtype dtype : kDtypes) {
    for (const Shape& shape : {Shape{6, 2, 32, 16}, Shape{4, 1, 256, 16}, Shape{3, 3, 8, 5}}) {
      if (!KvDtypeSupported(dtype, shape.head_dim)) continue;
      for (int32_t w : kWindows) {
        for (AttentionImpl impl : Impls(shape)) {
          Fixture f(shape, kLengths, 23, dtype);  // fresh: PoisonBlock below
          SCOPED_TRACE(std::string(AttentionImplName(impl)) + " " + KvDtypeName(dtype) +
                       " window " + std::to_string(w));
          for (size_t s = 0; s < kLengths.size(); ++s) {
            const int32_t len = kLengths[s];
            const std::vector<float> one_shot = f.Prefill(impl, s, 0, len, w);
            const std::vector<float> plain = f.Prefill(impl, s, 0, len, 0);
            const std::vector<float> portable =
                f.Prefill(AttentionImpl::kReference, s, 0, len, w);
            for (int32_t t = 0; t < len; ++t) {
              const std::vector<float>& same = t < w ? plain : portable;
              for (int32_t i = 0; i < f.q_width(); ++i) {
                ASSERT_EQ(one_shot[t * f.q_width() + i], same[t * f.q_width() + i]) << t;
              }
            }
            for (int32_t chunk : {7, 3}) {
              for (int32_t start = 0; start < len; start += chunk) {
                const int32_t count = std::min(chunk, len - start);
                const std::vector<float> part = f.Prefill(impl, s, start, count, w);
                for (int32_t i = 0; i < count * f.q_width(); ++i) {
                  ASSERT_EQ(part[i], one_shot[start * f.q_width() + i]) << "seq " << s;
                }
              }
            }
            // Poison the blocks before the last token's window, then decode it.
            const int32_t last = len - 1;
            const int32_t lo = std::max(0, last - w + 1);
            for (int32_t b = 0; b < lo / shape.block_size; ++b) f.PoisonBlock(s, b);
            const std::vector<float> dec = f.Decode(impl, s, last, w);
            for (int32_t i = 0; i < f.q_width(); ++i) {
              ASSERT_FALSE(std::isnan(dec[i]));
              ASSERT_EQ(dec[i], one_shot[last * f.q_width() + i]) << "seq " << s;
            }
          }
        }
      }
    }
  }
}

TEST(PagedAttentionTest, Support) {
  EXPECT_TRUE(AttentionSupported(AttentionImpl::kReference, 5, 8));
  EXPECT_FALSE(AttentionSupported(AttentionImpl::kAvx512, 5, 64));
  EXPECT_FALSE(AttentionSupported(AttentionImpl::kReference, 0, 64));
  EXPECT_TRUE(AttentionSupported(BestAttentionImpl(16, 64), 16, 64));
}

}  // namespace
}  // namespace weft::kernels

// The CUDA decode and prefill attention kernels against the CPU twin
// (kernels/cpu/paged_attention.h, reference implementation) on the same, dequantized
// K/V values: random inputs, ragged non-contiguous block tables, partially filled last
// blocks, GQA ratios 1/3/8, head sizes 64 and 128, fp16/bf16/int8 KV, contexts from 1 to
// 8K (one split and many), and chunked-prefill boundaries (chunks starting mid-block,
// on a block edge, after a long cached prefix).
#include "kernels/cuda/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "common/ggml_types.h"
#include "gtest/gtest.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cuda/testing/cuda_test_util.h"
#include "kernels/cuda/testing/kv_reference.h"

namespace weft::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::HostPagedKv;
using testing::WorstError;

struct Shape {
  int32_t num_kv_heads;
  int32_t group;  // query heads per KV head
  int32_t head_dim;
  int32_t block_size;
  KvDtype dtype;
  int32_t window = 0;  // sliding window (0: none), for the kernels and the CPU
};

// Sequences of the given total lengths written through shuffled block tables, their
// queries, and the CPU reference on the dequantized pool.
class World {
 public:
  World(const Shape& shape, const std::vector<int32_t>& lengths, uint32_t seed)
      : shape_(shape), rng_(seed) {
    const int32_t bs = shape.block_size;
    int32_t needed = 0;
    for (int32_t len : lengths) needed += (len + bs - 1) / bs;
    num_blocks_ = needed + 3;
    host_ = std::make_unique<HostPagedKv>(shape.dtype, num_blocks_, bs, shape.num_kv_heads,
                                          shape.head_dim);
    std::vector<int32_t> ids(num_blocks_);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng_);
    std::normal_distribution<float> val(0.0f, 1.0f);
    const int32_t kvw = shape.num_kv_heads * shape.head_dim;
    size_t next = 0;
    for (int32_t len : lengths) {
      std::vector<int32_t> table;
      for (int32_t b = 0; b < (len + bs - 1) / bs; ++b) table.push_back(ids[next++]);
      offsets_.push_back(static_cast<int32_t>(tables_.size()));
      tables_.insert(tables_.end(), table.begin(), table.end());
      std::vector<float> k(kvw), v(kvw);
      for (int32_t p = 0; p < len; ++p) {
        for (float& x : k) x = val(rng_);
        for (float& x : v) x = val(rng_);
        host_->Write(k.data(), v.data(), int64_t{table[p / bs]} * bs + p % bs);
      }
    }
    host_->CpuPool(&cpu_pool_, &cpu_kv_);
    data_ = std::make_unique<DeviceArray<uint8_t>>(host_->data());
    scales_ = std::make_unique<DeviceArray<uint16_t>>(
        host_->scales().empty() ? std::vector<uint16_t>(1) : host_->scales());
    d_tables_ = std::make_unique<DeviceArray<int32_t>>(tables_);
    d_offsets_ = std::make_unique<DeviceArray<int32_t>>(offsets_);
  }

  int32_t num_heads() const { return shape_.num_kv_heads * shape_.group; }
  int32_t window() const { return shape_.window; }
  int32_t q_width() const { return num_heads() * shape_.head_dim; }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(shape_.head_dim)); }
  PagedKvView view() const { return host_->View(data_->get(), scales_->get()); }
  const int32_t* table(size_t s) const { return tables_.data() + offsets_[s]; }

  std::vector<float> RandomQ(int64_t rows) {
    std::normal_distribution<float> val(0.0f, 1.0f);
    std::vector<float> q(rows * q_width());
    for (float& x : q) x = val(rng_);
    return q;
  }

  AttentionParams CpuParams() const {
    AttentionParams p;
    p.num_heads = num_heads();
    p.scale = scale();
    p.kv_head_begin = 0;
    p.kv_head_end = shape_.num_kv_heads;
    p.window = shape_.window;
    return p;
  }

  // CPU decode of sequence s at context `ctx` (its query row in q).
  std::vector<float> CpuDecode(size_t s, const float* q, int32_t ctx) const {
    std::vector<float> out(q_width());
    PagedDecodeAttention(AttentionImpl::kReference, q, cpu_kv_, table(s), ctx, CpuParams(),
                         out.data());
    return out;
  }
  std::vector<float> CpuPrefill(size_t s, const float* q, int32_t start, int32_t n) const {
    std::vector<float> out(int64_t{n} * q_width());
    PagedPrefillAttention(AttentionImpl::kReference, q, q_width(), start, 0, n, cpu_kv_,
                          table(s), CpuParams(), out.data(), q_width());
    return out;
  }

  const int32_t* d_tables() const { return d_tables_->get(); }
  const int32_t* d_offsets() const { return d_offsets_->get(); }

 private:
  Shape shape_;
  std::mt19937 rng_;
  int32_t num_blocks_ = 0;
  std::unique_ptr<HostPagedKv> host_;
  std::vector<int32_t> tables_, offsets_;
  std::vector<float> cpu_pool_;
  PagedKvLayer cpu_kv_;
  std::unique_ptr<DeviceArray<uint8_t>> data_;
  std::unique_ptr<DeviceArray<uint16_t>> scales_;
  std::unique_ptr<DeviceArray<int32_t>> d_tables_, d_offsets_;
};

std::vector<float> Bf16ToFloats(const std::vector<uint16_t>& bits) {
  std::vector<float> out;
  out.reserve(bits.size());
  for (uint16_t b : bits) out.push_back(Bf16ToFp32(b));
  return out;
}

// The decode workspace and split counters as the CUDA backend's ModelRunner keeps them:
// one of each for every launch, grown only when too small (the counters then zeroed).
struct SharedDecodeBuffers {
  std::unique_ptr<DeviceArray<float>> ws;
  std::unique_ptr<DeviceArray<int32_t>> counters;
  void Reserve(int64_t ws_floats, int64_t num_counters) {
    if (ws == nullptr || static_cast<int64_t>(ws->size()) < ws_floats) {
      ws = std::make_unique<DeviceArray<float>>(ws_floats);
      ws->FillBytes(0xff);  // NaNs: the partials need no initial value
    }
    if (counters == nullptr || static_cast<int64_t>(counters->size()) < num_counters) {
      counters = std::make_unique<DeviceArray<int32_t>>(num_counters);
      counters->FillBytes(0);
    }
  }
};

// q rounded as the tensor-core kernel rounds it (q * scale * log2 e to the MMA type:
// bf16 for bf16 KV, fp16 otherwise), mapped back: the CPU reference then sees the same
// queries, and the comparison measures the rest (the softmax weights' rounding).
std::vector<float> AsTensorCoreQ(const std::vector<float>& q, KvDtype dtype, float scale) {
  const float qs = scale * 1.4426950408889634f;
  std::vector<float> out(q.size());
  for (size_t i = 0; i < q.size(); ++i) {
    const float x = q[i] * qs;
    const float r = dtype == KvDtype::kBf16 ? Bf16ToFp32(Fp32ToBf16(x)) : Fp16ToFp32(Fp32ToFp16(x));
    out[i] = r / qs;
  }
  return out;
}

// Runs a decode kernel on every sequence at its full length with the given split
// length (0: the kernel's PlanDecode) and compares with the CPU. Each kernel runs twice
// on the same workspace (as graph replays do): the results must be the same bits and
// the split counters back at zero. `shared`: buffers earlier calls used (default fresh).
// kGrouped on tensor cores (groups >= 4) rounds q and the softmax weights: the reference
// sees q rounded likewise (AsTensorCoreQ) and the tolerance is the tensor-core prefill's.
// device_min_partition > 0: split lengths derived on the device from the contexts.
void CheckDecode(const Shape& shape, const std::vector<int32_t>& lengths, int32_t partition,
                 ActDtype out_dtype, uint32_t seed,
                 DecodeKernel kernel = DecodeKernel::kPipelined,
                 SharedDecodeBuffers* shared = nullptr, int32_t device_min_partition = 0) {
  SCOPED_TRACE(DecodeKernelName(kernel));
  World w(shape, lengths, seed);
  const int32_t items = static_cast<int32_t>(lengths.size());
  const int32_t max_ctx = *std::max_element(lengths.begin(), lengths.end());
  const std::vector<float> q = w.RandomQ(items);
  const bool tc =
      kernel == DecodeKernel::kGrouped && shape.group >= kGroupedDecodeTensorCoreMinGroup;
  const std::vector<float> q_ref = tc ? AsTensorCoreQ(q, shape.dtype, w.scale()) : q;
  const double tc_tol = shape.dtype == KvDtype::kBf16 ? 5e-3 : 2e-3;
  std::vector<float> want;
  for (int32_t i = 0; i < items; ++i) {
    const std::vector<float> o =
        w.CpuDecode(i, q_ref.data() + int64_t{i} * w.q_width(), lengths[i]);
    want.insert(want.end(), o.begin(), o.end());
  }
  DecodeAttentionArgs a;
  DeviceArray<float> dq(q);
  DeviceArray<int32_t> dctx(lengths);
  a.q = dq.get();
  a.q_stride = w.q_width();
  a.out_stride = w.q_width();
  a.out_dtype = out_dtype;
  a.context_lens = dctx.get();
  a.block_tables = w.d_tables();
  a.block_table_offsets = w.d_offsets();
  a.num_items = items;
  a.num_heads = w.num_heads();
  a.scale = w.scale();
  a.window = w.window();
  a.kernel = kernel;
  DecodeShape ds;
  ds.num_items = items;
  ds.num_kv_heads = shape.num_kv_heads;
  ds.group_size = shape.group;
  ds.head_dim = shape.head_dim;
  ds.block_size = shape.block_size;
  ds.max_context = max_ctx;
  ds.dtype = shape.dtype;
  a.partition_size = partition > 0 ? partition : PlanDecode(kernel, ds).partition_size;
  a.max_splits = DecodeNumSplits(max_ctx, a.partition_size) + 1;  // one spare: exits early
  a.device_min_partition = device_min_partition;
  const int64_t ws_floats =
      DecodeWorkspaceFloats(items, a.num_heads, shape.head_dim, a.max_splits);
  SharedDecodeBuffers fresh;
  if (shared == nullptr) shared = &fresh;
  shared->Reserve(ws_floats, DecodeSplitCounters(items, shape.num_kv_heads));
  a.workspace = shared->ws->get();
  a.split_counters = shared->counters->get();
  std::vector<float> got, again;
  if (out_dtype == ActDtype::kF32) {
    DeviceArray<float> out(want.size());
    a.out = out.get();
    WEFT_EXPECT_CUDA_OK(PagedDecodeAttention(a, w.view(), nullptr));
    got = out.ToHost();
    WEFT_EXPECT_CUDA_OK(PagedDecodeAttention(a, w.view(), nullptr));
    again = out.ToHost();
    EXPECT_LE(WorstError(got, want, tc ? tc_tol : 2e-5, tc ? 2 * tc_tol : 2e-4), 1.0)
        << "partition " << a.partition_size;
  } else {
    DeviceArray<uint16_t> out(want.size());
    a.out = out.get();
    WEFT_EXPECT_CUDA_OK(PagedDecodeAttention(a, w.view(), nullptr));
    got = Bf16ToFloats(out.ToHost());
    WEFT_EXPECT_CUDA_OK(PagedDecodeAttention(a, w.view(), nullptr));
    again = Bf16ToFloats(out.ToHost());
    EXPECT_LE(WorstError(got, want, tc ? tc_tol : 1e-3, tc ? 2 * tc_tol + 1.0 / 128 : 1.0 / 128),
              1.0)
        << "partition " << a.partition_size;
  }
  EXPECT_EQ(got, again) << "a second launch on the same workspace";
  const std::vector<int32_t> left = shared->counters->ToHost();
  for (size_t i = 0; i < left.size(); ++i) ASSERT_EQ(left[i], 0) << "split counter " << i;
}

constexpr DecodeKernel kBothKernels[] = {DecodeKernel::kPipelined, DecodeKernel::kSplitV1};

std::vector<Shape> AllShapes() {
  std::vector<Shape> out;
  for (KvDtype dtype : {KvDtype::kF16, KvDtype::kBf16, KvDtype::kInt8}) {
    for (int32_t hd : {64, 128}) {
      out.push_back({4, 1, hd, 16, dtype});  // MHA
      out.push_back({3, 3, hd, 16, dtype});  // the default model's GQA 3:1
      out.push_back({2, 8, hd, 16, dtype});  // GQA 8:1
    }
    out.push_back({1, 4, 256, 16, dtype});       // Gemma 3 270M: head_dim 256, MQA 4:1
    out.push_back({1, 4, 256, 16, dtype, 512});  // its local layers' 512-token window
    out.push_back({2, 4, 128, 16, dtype, 40});   // a window cut inside blocks and splits
  }
  return out;
}

std::string ShapeName(const ::testing::TestParamInfo<Shape>& info) {
  const Shape& s = info.param;
  return std::string(KvDtypeName(s.dtype)) + "_hd" + std::to_string(s.head_dim) + "_kv" +
         std::to_string(s.num_kv_heads) + "_g" + std::to_string(s.group) +
         (s.window > 0 ? "_w" + std::to_string(s.window) : "");
}

class AttentionTest : public ::testing::TestWithParam<Shape> {};

TEST_P(AttentionTest, DecodeShortContextsOneSplit) {
  WEFT_SKIP_WITHOUT_CUDA();
  // 1 token, a partial block, a full block, one past it, ragged lengths (tiles of 32
  // rows: 1, 15, 16, 17 and 100 end inside a tile).
  for (DecodeKernel k : kBothKernels) {
    CheckDecode(GetParam(), {1, 15, 16, 17, 100, 250}, 256, ActDtype::kF32, 1, k);
  }
}

TEST_P(AttentionTest, DecodeSplitKWithReduction) {
  WEFT_SKIP_WITHOUT_CUDA();
  // Several splits per sequence, split edges inside blocks (partition 96 = 6 blocks; 100
  // is not a multiple of 16), contexts that end exactly on a split edge.
  for (DecodeKernel k : kBothKernels) {
    CheckDecode(GetParam(), {1, 96, 97, 300, 777, 1025}, 96, ActDtype::kF32, 2, k);
    CheckDecode(GetParam(), {2048, 5, 2000}, 100, ActDtype::kF32, 3, k);
  }
  // The pipelined kernel takes any split length: odd ones, shorter than a tile.
  CheckDecode(GetParam(), {1, 40, 333, 1000}, 7, ActDtype::kF32, 12);
  CheckDecode(GetParam(), {64, 65, 129}, 33, ActDtype::kF32, 13);
}

// One workspace and one set of counters for batches that grow and shrink (issue 24: a
// smaller plan after a larger one lost its heads when the counters followed the plan's
// partials), for each kernel.
TEST_P(AttentionTest, DecodePlansOfDifferentShapesShareOneWorkspace) {
  WEFT_SKIP_WITHOUT_CUDA();
  const std::vector<int32_t> four(4, 300), one(1, 300);
  for (DecodeKernel k : kBothKernels) {
    SharedDecodeBuffers shared;
    uint32_t seed = 20;
    for (const std::vector<int32_t>& lens :
         {four, one, four, std::vector<int32_t>{1000, 17, 300, 64, 129, 256, 5, 900}, one,
          std::vector<int32_t>{40, 33}, std::vector<int32_t>{2000}, four}) {
      CheckDecode(GetParam(), lens, 64, ActDtype::kF32, ++seed, k, &shared);
    }
  }
}

// The kGrouped kernel (not the default until a GPU measures it): one split and several,
// odd split lengths, bf16 output, one workspace for plans of different shapes, and a grid
// planned for a longer context with split lengths derived on the device.
TEST_P(AttentionTest, DecodeGroupedKernel) {
  WEFT_SKIP_WITHOUT_CUDA();
  const DecodeKernel k = DecodeKernel::kGrouped;
  CheckDecode(GetParam(), {1, 15, 16, 17, 100, 250}, 256, ActDtype::kF32, 1, k);
  CheckDecode(GetParam(), {1, 96, 97, 300, 777, 1025}, 96, ActDtype::kF32, 2, k);
  CheckDecode(GetParam(), {1, 40, 333, 1000}, 7, ActDtype::kF32, 12, k);
  CheckDecode(GetParam(), {33, 600}, 0, ActDtype::kBf16, 4, k);
  SharedDecodeBuffers shared;
  CheckDecode(GetParam(), {2000, 300, 40, 64}, 128, ActDtype::kF32, 5, k, &shared,
              kDecodeDeviceMinPartition);
  CheckDecode(GetParam(), {300}, 64, ActDtype::kF32, 6, k, &shared);
  CheckDecode(GetParam(), {8000, 65, 1}, 64, ActDtype::kF32, 7, k, &shared,
              kDecodeDeviceMinPartition);
}

TEST_P(AttentionTest, DecodeBf16Output) {
  WEFT_SKIP_WITHOUT_CUDA();
  for (DecodeKernel k : kBothKernels) CheckDecode(GetParam(), {33, 600}, 0, ActDtype::kBf16, 4, k);
}

// Runs a prefill kernel (tc: the tensor-core one) over chunks (cached prefix length,
// chunk length) of several sequences in one launch and compares every query row with
// the CPU.
void CheckPrefill(const Shape& shape, const std::vector<std::pair<int32_t, int32_t>>& chunks,
                  uint32_t seed, bool tc = false) {
  SCOPED_TRACE(tc ? "tensor cores" : "cuda cores");
  std::vector<int32_t> lengths;
  for (const auto& [start, n] : chunks) lengths.push_back(start + n);
  World w(shape, lengths, seed);
  std::vector<int32_t> q_start, start_pos, num_tokens;
  int32_t rows = 0;
  for (const auto& [start, n] : chunks) {
    q_start.push_back(rows);
    start_pos.push_back(start);
    num_tokens.push_back(n);
    rows += n;
  }
  const std::vector<float> q = w.RandomQ(rows);
  const std::vector<float> q_ref = tc ? AsTensorCoreQ(q, shape.dtype, w.scale()) : q;
  std::vector<float> want;
  for (size_t s = 0; s < chunks.size(); ++s) {
    const std::vector<float> o = w.CpuPrefill(
        s, q_ref.data() + int64_t{q_start[s]} * w.q_width(), start_pos[s], num_tokens[s]);
    want.insert(want.end(), o.begin(), o.end());
  }
  std::vector<int32_t> tile_seq, tile_q;
  BuildPrefillTiles(num_tokens.data(), static_cast<int32_t>(chunks.size()),
                    tc ? PrefillTcTileTokens(shape.group)
                       : PrefillTileTokens(shape.group, shape.head_dim),
                    &tile_seq, &tile_q);
  DeviceArray<float> dq(q), out(want.size());
  DeviceArray<int32_t> dqs(q_start), dsp(start_pos), dnt(num_tokens), dts(tile_seq), dtq(tile_q);
  PrefillAttentionArgs a;
  a.q = dq.get();
  a.q_stride = w.q_width();
  a.out = out.get();
  a.out_stride = w.q_width();
  a.out_dtype = ActDtype::kF32;
  a.seq_q_start = dqs.get();
  a.seq_start_pos = dsp.get();
  a.seq_num_tokens = dnt.get();
  a.block_tables = w.d_tables();
  a.block_table_offsets = w.d_offsets();
  a.tile_seq = dts.get();
  a.tile_q_begin = dtq.get();
  a.num_tiles = static_cast<int32_t>(tile_seq.size());
  a.num_heads = w.num_heads();
  a.scale = w.scale();
  a.window = w.window();
  if (tc) {
    WEFT_EXPECT_CUDA_OK(PagedPrefillAttentionTc(a, w.view(), nullptr));
    // The softmax weights go to the tensor cores as bf16 (fp16): ~2^-9 (2^-11) each.
    const double tol = shape.dtype == KvDtype::kBf16 ? 5e-3 : 2e-3;
    EXPECT_LE(WorstError(out.ToHost(), want, tol, 2 * tol), 1.0);
  } else {
    WEFT_EXPECT_CUDA_OK(PagedPrefillAttention(a, w.view(), nullptr));
    EXPECT_LE(WorstError(out.ToHost(), want, 2e-5, 2e-4), 1.0);
  }
}

TEST_P(AttentionTest, PrefillChunksMatchCpu) {
  WEFT_SKIP_WITHOUT_CUDA();
  // (cached prefix, chunk length): whole prompts, chunks starting on a block edge and
  // mid-block, single-token chunks, a chunk after a long prefix.
  CheckPrefill(GetParam(), {{0, 1}, {0, 37}, {16, 16}, {5, 1}, {100, 77}, {0, 130}, {1500, 70}},
               5);
}

TEST_P(AttentionTest, PrefillOnTensorCoresMatchesCpu) {
  WEFT_SKIP_WITHOUT_CUDA();
  // Long chunks (the backend's use: >= 128 tokens), chunks after a cached prefix starting
  // mid-block and on a block edge, and short ones (the kernel takes any length).
  CheckPrefill(GetParam(), {{0, 130}, {16, 200}, {5, 1}, {100, 77}, {1500, 300}, {0, 64}}, 21,
               true);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest, ::testing::ValuesIn(AllShapes()), ShapeName);

// Long contexts (up to 8K) on a few shapes: bf16 and int8, GQA 8:1, both head sizes,
// the partition the backend would pick.
TEST(AttentionLongTest, Decode8K) {
  WEFT_SKIP_WITHOUT_CUDA();
  for (DecodeKernel k : kBothKernels) {
    CheckDecode({2, 8, 128, 16, KvDtype::kBf16}, {8192, 4097, 1}, 0, ActDtype::kF32, 6, k);
    CheckDecode({3, 3, 64, 16, KvDtype::kInt8}, {8192, 3000}, 0, ActDtype::kF32, 7, k);
  }
}

TEST(AttentionLongTest, DecodeLlama8BShape) {
  WEFT_SKIP_WITHOUT_CUDA();
  // The benchmark's shape (8 KV heads, GQA 4, head_dim 128) at a few lengths, with the
  // plan the backend would use, every KV type.
  for (KvDtype dt : {KvDtype::kBf16, KvDtype::kF16, KvDtype::kInt8}) {
    CheckDecode({8, 4, 128, 16, dt}, {2048, 2048, 1999, 17, 1}, 0, ActDtype::kF32, 14);
    CheckDecode({8, 4, 128, 16, dt}, {2048, 700}, 0, ActDtype::kBf16, 15);
  }
}

TEST(AttentionLongTest, DecodeLargeGroups) {
  WEFT_SKIP_WITHOUT_CUDA();
  // Groups of 16 and 32 query heads per KV head (256- and 512-thread CTAs), and 5 (padded
  // to 8 heads, three of them idle).
  CheckDecode({1, 16, 128, 16, KvDtype::kBf16}, {1, 300, 1500}, 0, ActDtype::kF32, 16);
  CheckDecode({2, 32, 64, 16, KvDtype::kInt8}, {77, 1024}, 128, ActDtype::kF32, 17);
  CheckDecode({2, 32, 128, 16, KvDtype::kF16}, {500}, 64, ActDtype::kF32, 18);
  CheckDecode({3, 5, 64, 16, KvDtype::kBf16}, {31, 32, 33, 900}, 0, ActDtype::kF32, 19);
}

TEST(AttentionLongTest, Prefill8K) {
  WEFT_SKIP_WITHOUT_CUDA();
  // The last chunk of an 8K prompt, and a chunk ending mid-block right before it.
  CheckPrefill({2, 8, 128, 16, KvDtype::kBf16}, {{8128, 64}, {4000, 21}}, 10);
  CheckPrefill({3, 3, 64, 16, KvDtype::kInt8}, {{8000, 40}}, 11);
  // Tensor cores: a whole 2K prompt (Llama-8B shape) and the last chunk of an 8K one.
  CheckPrefill({8, 4, 128, 16, KvDtype::kBf16}, {{0, 2048}}, 22, true);
  CheckPrefill({2, 8, 128, 16, KvDtype::kInt8}, {{7936, 256}}, 23, true);
  CheckPrefill({2, 32, 64, 16, KvDtype::kF16}, {{0, 300}}, 24, true);
}

TEST(AttentionLongTest, OddBlockSize) {
  WEFT_SKIP_WITHOUT_CUDA();
  for (DecodeKernel k : kBothKernels) {
    CheckDecode({2, 3, 64, 7, KvDtype::kF16}, {1, 6, 7, 8, 300}, 64, ActDtype::kF32, 8, k);
    CheckDecode({2, 3, 128, 12, KvDtype::kInt8}, {11, 12, 13, 400}, 64, ActDtype::kF32, 20, k);
  }
  CheckPrefill({2, 3, 64, 7, KvDtype::kF16}, {{0, 20}, {6, 9}, {14, 1}}, 9);
  CheckPrefill({2, 3, 64, 7, KvDtype::kF16}, {{0, 150}, {6, 129}}, 25, true);
}

TEST(AttentionLongTest, GraphPaddingGivesZeros) {
  WEFT_SKIP_WITHOUT_CUDA();
  for (DecodeKernel kernel :
       {DecodeKernel::kPipelined, DecodeKernel::kSplitV1, DecodeKernel::kGrouped}) {
    SCOPED_TRACE(DecodeKernelName(kernel));
    const Shape shape{2, 3, 64, 16, KvDtype::kBf16};
    World w(shape, {40}, 9);
    const std::vector<int32_t> ctx = {0, 40};  // item 0 is a padding slot
    const std::vector<int32_t> offsets = {0, 0};
    const std::vector<float> q = w.RandomQ(2);
    DeviceArray<float> dq(q), out(2 * w.q_width());
    out.FillBytes(0x7f);
    DeviceArray<int32_t> dctx(ctx), doff(offsets);
    DecodeAttentionArgs a;
    a.q = dq.get();
    a.q_stride = w.q_width();
    a.out = out.get();
    a.out_stride = w.q_width();
    a.out_dtype = ActDtype::kF32;
    a.context_lens = dctx.get();
    a.block_tables = w.d_tables();
    a.block_table_offsets = doff.get();
    a.num_items = 2;
    a.num_heads = w.num_heads();
    a.scale = w.scale();
    a.partition_size = 32;
    a.max_splits = 4;
    a.kernel = kernel;
    DeviceArray<float> ws(DecodeWorkspaceFloats(2, a.num_heads, 64, 4));
    DeviceArray<int32_t> counters(DecodeSplitCounters(2, shape.num_kv_heads));
    counters.FillBytes(0);
    a.workspace = ws.get();
    a.split_counters = counters.get();
    WEFT_EXPECT_CUDA_OK(PagedDecodeAttention(a, w.view(), nullptr));
    const std::vector<float> got = out.ToHost();
    for (int32_t i = 0; i < w.q_width(); ++i) ASSERT_EQ(got[i], 0.0f) << i;
    const std::vector<float> want = w.CpuDecode(0, q.data() + w.q_width(), 40);
    EXPECT_LE(WorstError(std::vector<float>(got.begin() + w.q_width(), got.end()), want, 2e-5,
                         2e-4),
              1.0);
  }
}

TEST(AttentionArgsTest, RejectsBadShapes) {
  DecodeAttentionArgs a;
  PagedKvView kv;
  kv.num_kv_heads = 2;
  kv.head_dim = 64;
  a.num_heads = 3;  // not a multiple of the KV heads
  a.num_items = 1;
  a.partition_size = 64;
  EXPECT_EQ(PagedDecodeAttention(a, kv, nullptr), cudaErrorInvalidValue);
  a.num_heads = 2 * 33;  // group of 33
  EXPECT_EQ(PagedDecodeAttention(a, kv, nullptr), cudaErrorInvalidValue);
  kv.head_dim = 256;
  a.num_heads = 2 * 32;  // group 32 at head_dim 256: past MaxAttentionGroup (16)
  EXPECT_EQ(PagedDecodeAttention(a, kv, nullptr), cudaErrorInvalidValue);
  a.num_heads = 2 * 4;
  a.window = -1;
  EXPECT_EQ(PagedDecodeAttention(a, kv, nullptr), cudaErrorInvalidValue);
  kv.head_dim = 64;
  a.window = 0;
  PrefillAttentionArgs p;
  p.num_heads = 4;
  kv.head_dim = 96;  // unsupported head size
  EXPECT_EQ(PagedPrefillAttention(p, kv, nullptr), cudaErrorInvalidValue);
}

TEST(AttentionHostTest, PartitionAndTiles) {
  // Scores fit shared memory for every group size; small grids get shorter splits.
  for (int32_t g : {1, 3, 8, 16, 32}) {
    const int32_t p = ChooseDecodePartition(64, 8, g, 16, 2048, 132);
    EXPECT_LE(g * p, 4096);
    EXPECT_EQ(p % 32, 0);
  }
  EXPECT_LT(ChooseDecodePartition(1, 2, 1, 16, 8192, 132),
            ChooseDecodePartition(256, 8, 1, 16, 8192, 132));
  EXPECT_EQ(PrefillTileTokens(1, 64), 64);
  EXPECT_EQ(PrefillTileTokens(3, 64), 21);
  EXPECT_EQ(PrefillTileTokens(8, 128), 4);
  EXPECT_EQ(PrefillTileTokens(32, 128), 1);
  EXPECT_EQ(PrefillTcTileTokens(1), 64);
  EXPECT_EQ(PrefillTcTileTokens(3), 21);
  EXPECT_EQ(PrefillTcTileTokens(32), 2);
  std::vector<int32_t> ts, tq;
  const std::vector<int32_t> n = {5, 0, 9};
  BuildPrefillTiles(n.data(), 3, 4, &ts, &tq);
  EXPECT_EQ(ts, (std::vector<int32_t>{0, 0, 2, 2, 2}));
  EXPECT_EQ(tq, (std::vector<int32_t>{0, 4, 0, 4, 8}));
}

TEST(AttentionHostTest, PipelinedDecodePlan) {
  DecodeShape s;  // the benchmark's reference point: Llama-8B shape, batch 64 x 2048
  s.num_items = 64;
  s.num_kv_heads = 8;
  s.group_size = 4;
  s.head_dim = 128;
  s.max_context = 2048;
  s.num_sms = 132;
  s.dtype = KvDtype::kBf16;
  const int32_t per_sm = PipelinedDecodeCtasPerSm(s.dtype, s.head_dim, s.group_size);
  EXPECT_GE(per_sm, 1);
  DecodePlan p = PlanDecode(DecodeKernel::kPipelined, s);
  EXPECT_EQ(p.partition_size % 32, 0);
  EXPECT_GE(int64_t{p.partition_size} * p.max_splits, 2048);
  // 512 (item, KV head) CTAs fill 132 SMs in one wave when 4 fit per SM: no split.
  if (per_sm * 132 >= 512) {
    EXPECT_EQ(p.max_splits, 1);
  }
  EXPECT_EQ(p.workspace_floats, DecodeWorkspaceFloats(64, 32, 128, p.max_splits));
  // One long sequence: many splits of >= 64 tokens.
  s.num_items = 1;
  s.max_context = 8192;
  p = PlanDecode(DecodeKernel::kPipelined, s);
  EXPECT_GE(p.max_splits, 16);
  EXPECT_GE(p.partition_size, 64);
  EXPECT_GE(int64_t{p.partition_size} * p.max_splits, 8192);
  // kSplitV1 keeps its own rule.
  EXPECT_EQ(PlanDecode(DecodeKernel::kSplitV1, s).partition_size,
            ChooseDecodePartition(1, 8, 4, 16, 8192, 132));
  // Workspace: partials and log-sum-exps; the counters (one per (item, KV head)) apart.
  EXPECT_EQ(DecodeWorkspaceFloats(2, 3, 64, 5), 2 * 3 * 5 * 65);
  EXPECT_EQ(DecodeSplitCounters(2, 3), 6);
}

// kGrouped's plan: partitions a multiple of its tile (64; 32 at head_dim 256) covering
// the context, >= 64 tokens when split, for every context up to a few tiles (the split
// search ends once a split would be under one tile), every KV type, head size and group.
TEST(AttentionHostTest, GroupedDecodePlan) {
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kBf16, KvDtype::kInt8}) {
    for (int32_t hd : {64, 128, 256}) {
      for (int32_t g : {1, 3, 4, 16, 32}) {
        if (g > MaxAttentionGroup(hd)) continue;
        EXPECT_GE(GroupedDecodeCtasPerSm(dt, hd, g), 1);
        for (int32_t items : {1, 64}) {
          for (int32_t ctx : {1, 63, 64, 65, 200, 2048, 8192}) {
            DecodeShape s;
            s.num_items = items;
            s.num_kv_heads = 2;
            s.group_size = g;
            s.head_dim = hd;
            s.max_context = ctx;
            s.dtype = dt;
            const DecodePlan p = PlanDecode(DecodeKernel::kGrouped, s);
            SCOPED_TRACE(::testing::Message() << KvDtypeName(dt) << " hd " << hd << " group "
                                              << g << " items " << items << " ctx " << ctx);
            EXPECT_EQ(p.partition_size % GroupedDecodeTileTokens(hd), 0);
            EXPECT_GE(int64_t{p.partition_size} * p.max_splits, ctx);
            if (p.max_splits > 1) {
              EXPECT_GE(p.partition_size, 64);
            }
            EXPECT_EQ(p.max_splits, DecodeNumSplits(ctx, p.partition_size));
          }
        }
      }
    }
  }
  // One long sequence on 132 SMs: split many ways.
  DecodeShape s;
  s.num_items = 1;
  s.num_kv_heads = 8;
  s.group_size = 4;
  s.head_dim = 128;
  s.max_context = 8192;
  EXPECT_GE(PlanDecode(DecodeKernel::kGrouped, s).max_splits, 8);
}

}  // namespace
}  // namespace weft::kernels::cuda

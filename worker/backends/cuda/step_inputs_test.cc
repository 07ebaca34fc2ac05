// StepInputs (plain C++, runs in every build): flattening, decode/prefill split, tiles,
// logits rows, graph-mode padding, the packed blob, and the batch validation errors.
#include "worker/backends/cuda/step_inputs.h"

#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "common/plan/testing/plan_builder.h"
#include "gtest/gtest.h"

namespace weft::cuda_backend {
namespace {

StepLimits Limits() {
  StepLimits l;
  l.block_size = 4;
  l.num_blocks = 20;
  l.context_length = 64;
  l.vocab_size = 100;
  l.prefill_tile_tokens = 3;
  return l;
}

template <typename T>
std::vector<T> Read(const std::vector<uint8_t>& blob, size_t offset, size_t n) {
  std::vector<T> v(n);
  std::memcpy(v.data(), blob.data() + offset, n * sizeof(T));
  return v;
}

TEST(StepInputsTest, MixedBatch) {
  const std::vector<int32_t> prompt = {5, 6, 7, 8, 9, 10, 11};
  const std::vector<int32_t> decode = {42};
  const std::vector<int32_t> table_a = {3, 9, 1};
  const std::vector<int32_t> table_b = {7, 2, 11, 4};
  ForwardBatch batch;
  // A chunk of 5 prompt tokens at positions 2..6 (no logits), then a decode at position 9.
  batch.sequences.push_back({absl::MakeConstSpan(prompt).subspan(0, 5), 2,
                             absl::MakeConstSpan(table_a), false});
  batch.sequences.push_back({absl::MakeConstSpan(decode), 9, absl::MakeConstSpan(table_b), true});
  StepInputs in;
  ASSERT_TRUE(in.Build(batch, Limits(), StepGraph::Eager()).ok());
  EXPECT_EQ(in.num_tokens(), 6);
  EXPECT_EQ(in.token_ids(), (std::vector<int32_t>{5, 6, 7, 8, 9, 42}));
  EXPECT_EQ(in.positions(), (std::vector<int32_t>{2, 3, 4, 5, 6, 9}));
  // position p -> table[p / 4] * 4 + p % 4
  EXPECT_EQ(in.slots(), (std::vector<int64_t>{14, 15, 36, 37, 38, 45}));
  EXPECT_EQ(in.tables(), (std::vector<int32_t>{3, 9, 7, 2, 11}));  // only blocks needed
  EXPECT_EQ(in.dec_row(), (std::vector<int32_t>{5}));
  EXPECT_EQ(in.dec_ctx(), (std::vector<int32_t>{10}));
  EXPECT_EQ(in.dec_table(), (std::vector<int32_t>{2}));
  EXPECT_EQ(in.pf_q_start(), (std::vector<int32_t>{0}));
  EXPECT_EQ(in.pf_start_pos(), (std::vector<int32_t>{2}));
  EXPECT_EQ(in.pf_num_tokens(), (std::vector<int32_t>{5}));
  EXPECT_EQ(in.pf_table(), (std::vector<int32_t>{0}));
  EXPECT_EQ(in.tile_seq(), (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(in.tile_q_begin(), (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(in.logit_rows(), (std::vector<int32_t>{5}));
  ASSERT_EQ(in.output_rows().size(), 1u);
  EXPECT_EQ(in.output_rows()[0].logits_row, 0);
  EXPECT_EQ(in.output_rows()[0].sequence, 1);
  EXPECT_EQ(in.max_decode_context(), 10);

  const StepLayout l = in.layout();
  std::vector<uint8_t> blob(l.total_bytes, 0xee);
  in.Pack(blob.data());
  EXPECT_EQ(Read<int64_t>(blob, l.slots, 6), in.slots());
  EXPECT_EQ(Read<int32_t>(blob, l.tables, 5), in.tables());
  EXPECT_EQ(Read<int32_t>(blob, l.tile_q_begin, 2), in.tile_q_begin());
  EXPECT_EQ(in.upload_bytes(), l.tables + 5 * sizeof(int32_t));
  for (size_t off : {l.slots, l.token_ids, l.dec_row, l.pf_table, l.logit_rows, l.tables}) {
    EXPECT_EQ(off % 16, 0u);
  }
}

// num_logits > 1 (teacher-forced scoring): one row per requested token, in order.
TEST(StepInputsTest, LongChunksGetTensorCoreTilesAtTheEnd) {
  // Chunks of >= 8 tokens use tiles of 5 (the tensor-core kernel), shorter ones tiles of
  // 3; the tensor-core tiles come after all the others.
  StepLimits limits = Limits();
  limits.prefill_tc_tile_tokens = 5;
  limits.prefill_tc_min_tokens = 8;
  std::vector<int32_t> long_a(12, 1), short_b(4, 2), long_c(8, 3);
  const std::vector<int32_t> table = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  ForwardBatch batch;
  batch.sequences.push_back({absl::MakeConstSpan(long_a), 0, absl::MakeConstSpan(table), true});
  batch.sequences.push_back({absl::MakeConstSpan(short_b), 0, absl::MakeConstSpan(table), true});
  batch.sequences.push_back({absl::MakeConstSpan(long_c), 3, absl::MakeConstSpan(table), true});
  StepInputs in;
  ASSERT_TRUE(in.Build(batch, limits, StepGraph::Eager()).ok());
  EXPECT_EQ(in.shape().tiles, 2 + 3 + 2);
  EXPECT_EQ(in.shape().tc_tiles, 3 + 2);
  EXPECT_EQ(in.tile_seq(), (std::vector<int32_t>{1, 1, 0, 0, 0, 2, 2}));
  EXPECT_EQ(in.tile_q_begin(), (std::vector<int32_t>{0, 3, 0, 5, 10, 0, 5}));
  limits.prefill_tc_tile_tokens = 0;  // off: every chunk on the CUDA-core tiles
  ASSERT_TRUE(in.Build(batch, limits, StepGraph::Eager()).ok());
  EXPECT_EQ(in.shape().tc_tiles, 0);
  EXPECT_EQ(in.shape().tiles, 4 + 2 + 3);
}

TEST(StepInputsTest, SeveralLogitsRowsPerChunk) {
  const std::vector<int32_t> prompt = {5, 6, 7, 8, 9, 10, 11};
  const std::vector<int32_t> decode = {42};
  const std::vector<int32_t> table_a = {3, 9};
  const std::vector<int32_t> table_b = {7, 2, 11};
  ForwardBatch batch;
  SequenceChunk scored{absl::MakeConstSpan(prompt), 0, absl::MakeConstSpan(table_a), false};
  scored.num_logits = 3;  // positions 4, 5, 6
  batch.sequences.push_back(scored);
  batch.sequences.push_back({absl::MakeConstSpan(decode), 9, absl::MakeConstSpan(table_b), true});
  StepInputs in;
  ASSERT_TRUE(in.Build(batch, Limits(), StepGraph::Eager()).ok());
  EXPECT_EQ(in.logit_rows(), (std::vector<int32_t>{4, 5, 6, 7}));
  ASSERT_EQ(in.output_rows().size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(in.output_rows()[i].logits_row, i);
    EXPECT_EQ(in.output_rows()[i].sequence, i < 3 ? 0 : 1);
  }
}

TEST(StepInputsTest, GraphModePadsToTheBucket) {
  const std::vector<int32_t> t1 = {1}, t2 = {2};
  const std::vector<int32_t> table = {4, 5};
  ForwardBatch batch;
  batch.sequences.push_back({absl::MakeConstSpan(t1), 4, absl::MakeConstSpan(table), true});
  batch.sequences.push_back({absl::MakeConstSpan(t2), 0, absl::MakeConstSpan(table), false});
  ASSERT_TRUE(StepInputs::AllDecode(batch));
  StepInputs in;
  ASSERT_TRUE(in.Build(batch, Limits(), StepGraph::Decode(4)).ok());
  EXPECT_EQ(in.shape().tokens, 4);
  EXPECT_EQ(in.shape().decode_items, 4);
  EXPECT_EQ(in.shape().table_entries, 4 * 16);  // bucket x blocks of the context length
  EXPECT_EQ(in.token_ids(), (std::vector<int32_t>{1, 2, 0, 0}));
  EXPECT_EQ(in.slots(), (std::vector<int64_t>{20, 16, -1, -1}));
  EXPECT_EQ(in.dec_row(), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(in.dec_ctx(), (std::vector<int32_t>{5, 1, 0, 0}));
  EXPECT_EQ(in.dec_table(), (std::vector<int32_t>{0, 2, 0, 0}));
  EXPECT_EQ(in.logit_rows(), (std::vector<int32_t>{0, 1, 2, 3}));
  ASSERT_EQ(in.output_rows().size(), 1u);
  EXPECT_EQ(in.output_rows()[0].logits_row, 0);
  // The same bucket always gives the same layout.
  StepInputs other;
  ForwardBatch one;
  one.sequences.push_back(batch.sequences[0]);
  ASSERT_TRUE(other.Build(one, Limits(), StepGraph::Decode(4)).ok());
  EXPECT_EQ(other.layout().tables, in.layout().tables);
  EXPECT_EQ(other.layout().total_bytes, in.layout().total_bytes);
}

// Which steps run how: decode graphs for <= max_graph_batch single-token chunks, piecewise
// graphs (with --graph_mixed_steps) for the rest up to max_graph_tokens, eager otherwise.
TEST(StepInputsTest, ChooseStepGraphByShape) {
  EXPECT_EQ(TokenBucket(1, 512), 16);
  EXPECT_EQ(TokenBucket(16, 512), 16);
  EXPECT_EQ(TokenBucket(17, 512), 32);
  EXPECT_EQ(TokenBucket(300, 512), 512);
  EXPECT_EQ(TokenBucket(512, 512), 512);
  EXPECT_EQ(TokenBucket(513, 512), 0);
  EXPECT_EQ(TokenBucket(int64_t{1} << 40, 512), 0);
  EXPECT_EQ(RowBucket(0), 0);
  EXPECT_EQ(RowBucket(1), 1);
  EXPECT_EQ(RowBucket(3), 4);
  EXPECT_EQ(RowBucket(64), 64);
  GraphPolicy p;
  p.graphs = true;
  p.max_graph_batch = 4;
  p.mixed = true;
  p.max_graph_tokens = 64;
  using K = StepGraph::Kind;
  struct Case {
    int32_t chunks;
    int64_t tokens;
    bool all_decode;
    K kind;
    int32_t bucket;
  };
  for (const Case& c : std::vector<Case>{
           {0, 0, true, K::kEager, 0},        // nothing to compute
           {1, 1, true, K::kDecode, 1},       // decode graphs first
           {3, 3, true, K::kDecode, 4},
           {4, 4, true, K::kDecode, 4},
           {5, 5, true, K::kPiecewise, 16},   // more decodes than max_graph_batch
           {2, 7, false, K::kPiecewise, 16},  // mixed
           {1, 16, false, K::kPiecewise, 16}, // prefill only
           {3, 17, false, K::kPiecewise, 32},
           {2, 64, false, K::kPiecewise, 64},
           {2, 65, false, K::kEager, 0},      // over max_graph_tokens
           {65, 65, true, K::kEager, 0}}) {
    const StepGraph g = ChooseStepGraph(p, c.chunks, c.tokens, c.all_decode);
    EXPECT_EQ(std::make_pair(g.kind, g.bucket), std::make_pair(c.kind, c.bucket))
        << c.chunks << " chunks, " << c.tokens << " tokens";
  }
  GraphPolicy decode_only = p;
  decode_only.mixed = false;  // --graph_mixed_steps=false: today's behaviour
  EXPECT_EQ(ChooseStepGraph(decode_only, 2, 7, false).kind, K::kEager);
  EXPECT_EQ(ChooseStepGraph(decode_only, 5, 5, true).kind, K::kEager);
  EXPECT_EQ(ChooseStepGraph(decode_only, 3, 3, true).kind, K::kDecode);
  GraphPolicy off = p;
  off.graphs = false;  // --cuda_graphs=false or TP > 1
  EXPECT_EQ(ChooseStepGraph(off, 3, 3, true).kind, K::kEager);
  EXPECT_EQ(ChooseStepGraph(off, 2, 7, false).kind, K::kEager);
}

// Piecewise graphs: tokens padded to the token bucket (token 0, position 0, slot -1: no
// KV write, in no decode item or tile), logits rows to their bucket (row 0, dropped); the
// real part equals the eager build; the arrays the pieces capture keep their offsets for
// every chunk layout of the same buckets.
TEST(StepInputsTest, PiecewiseModePadsTokensAndLogitRows) {
  const std::vector<int32_t> prompt = {5, 6, 7, 8, 9, 10, 11};
  const std::vector<int32_t> d1 = {42}, d2 = {43};
  const std::vector<int32_t> table_a = {3, 9, 1}, table_b = {7, 2, 11, 4}, table_c = {5, 6};
  ForwardBatch mixed;
  mixed.sequences = {{absl::MakeConstSpan(prompt).subspan(0, 5), 2, absl::MakeConstSpan(table_a),
                      false},
                     {absl::MakeConstSpan(d1), 9, absl::MakeConstSpan(table_b), true},
                     {absl::MakeConstSpan(d2), 4, absl::MakeConstSpan(table_c), true}};
  StepInputs eager, pw;
  ASSERT_TRUE(eager.Build(mixed, Limits(), StepGraph::Eager()).ok());
  ASSERT_TRUE(pw.Build(mixed, Limits(), StepGraph::Piecewise(16)).ok());
  EXPECT_EQ(pw.shape().tokens, 16);
  EXPECT_EQ(pw.shape().logit_rows, 2);
  std::vector<int32_t> ids = eager.token_ids(), pos = eager.positions();
  std::vector<int64_t> slots = eager.slots();
  ids.resize(16, 0);
  pos.resize(16, 0);
  slots.resize(16, -1);
  EXPECT_EQ(pw.token_ids(), ids);
  EXPECT_EQ(pw.positions(), pos);
  EXPECT_EQ(pw.slots(), slots);
  // Attention sees the real chunks only.
  EXPECT_EQ(pw.dec_row(), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(pw.dec_ctx(), eager.dec_ctx());
  EXPECT_EQ(pw.pf_q_start(), eager.pf_q_start());
  EXPECT_EQ(pw.pf_num_tokens(), eager.pf_num_tokens());
  EXPECT_EQ(pw.tile_seq(), eager.tile_seq());
  EXPECT_EQ(pw.tile_q_begin(), eager.tile_q_begin());
  EXPECT_EQ(pw.shape().decode_items, 2);
  EXPECT_EQ(pw.shape().tiles, eager.shape().tiles);
  EXPECT_EQ(pw.logit_rows(), (std::vector<int32_t>{5, 6}));
  ASSERT_EQ(pw.output_rows().size(), 2u);
  EXPECT_EQ(pw.output_rows()[1].logits_row, 1);
  EXPECT_EQ(pw.output_rows()[1].sequence, 2);

  // Three logits rows: padded to 4 with row 0.
  ForwardBatch prefill;
  prefill.sequences = {{absl::MakeConstSpan(prompt), 0, absl::MakeConstSpan(table_b), true},
                       {absl::MakeConstSpan(d1), 0, absl::MakeConstSpan(table_a), true},
                       {absl::MakeConstSpan(prompt).subspan(0, 3), 0, absl::MakeConstSpan(table_c),
                        true}};
  StepInputs other;
  ASSERT_TRUE(other.Build(prefill, Limits(), StepGraph::Piecewise(16)).ok());
  EXPECT_EQ(other.logit_rows(), (std::vector<int32_t>{6, 7, 10, 0}));
  EXPECT_EQ(other.shape().logit_rows, 4);
  // A prefill-only step of the same buckets as `mixed` (16 tokens, 2 rows): the captured
  // arrays sit at the same offsets, the attention arrays are its own.
  ForwardBatch prefill2;
  prefill2.sequences = {{absl::MakeConstSpan(prompt), 0, absl::MakeConstSpan(table_b), true},
                        {absl::MakeConstSpan(prompt).subspan(0, 4), 0,
                         absl::MakeConstSpan(table_c), true}};
  ASSERT_TRUE(other.Build(prefill2, Limits(), StepGraph::Piecewise(16)).ok());
  EXPECT_EQ(other.shape().decode_items, 0);
  const StepLayout a = pw.layout(), b = other.layout();
  EXPECT_EQ(std::make_tuple(a.slots, a.token_ids, a.positions, a.logit_rows),
            std::make_tuple(b.slots, b.token_ids, b.positions, b.logit_rows));
  // More tokens than the bucket: the caller's bug.
  EXPECT_EQ(other.Build(prefill, Limits(), StepGraph::Piecewise(8)).code(),
            absl::StatusCode::kInternal);
}

TEST(StepInputsTest, RejectsMalformedBatches) {
  const std::vector<int32_t> ok = {1, 2};
  const std::vector<int32_t> bad_id = {1, 100};
  const std::vector<int32_t> table = {0, 1};
  const std::vector<int32_t> bad_table = {0, 20};
  const std::vector<int32_t> empty;
  StepInputs in;
  auto run = [&](SequenceChunk c) {
    ForwardBatch b;
    b.sequences.push_back(c);
    return in.Build(b, Limits(), StepGraph::Eager());
  };
  EXPECT_TRUE(run({absl::MakeConstSpan(ok), 0, absl::MakeConstSpan(table), true}).ok());
  EXPECT_EQ(run({absl::MakeConstSpan(bad_id), 0, absl::MakeConstSpan(table), true}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run({absl::MakeConstSpan(empty), 0, absl::MakeConstSpan(table), true}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run({absl::MakeConstSpan(ok), 7, absl::MakeConstSpan(table), true}).code(),
            absl::StatusCode::kInvalidArgument);  // needs 3 blocks
  EXPECT_EQ(run({absl::MakeConstSpan(ok), 3, absl::MakeConstSpan(bad_table), true}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run({absl::MakeConstSpan(ok), 63, absl::MakeConstSpan(table), true}).code(),
            absl::StatusCode::kInvalidArgument);  // past the context length
}

// The backend keeps one StepInputs (and one staging blob) for its life: a step built
// after larger or differently shaped ones must equal the same step built fresh, array
// for array and byte for byte in its blob — nothing of an earlier step may survive.
TEST(StepInputsTest, ReusedAcrossShapesEqualsFresh) {
  StepLimits limits = Limits();
  limits.prefill_tc_tile_tokens = 5;
  limits.prefill_tc_min_tokens = 8;
  std::vector<int32_t> table(16);
  for (int32_t i = 0; i < 16; ++i) table[i] = 15 - i;
  const std::vector<int32_t> long_p(12, 3), short_p(4, 2), d1 = {7}, d2 = {8}, d3 = {9};
  auto chunk = [&](const std::vector<int32_t>& t, int32_t start, bool logits) {
    return SequenceChunk{absl::MakeConstSpan(t), start, absl::MakeConstSpan(table), logits};
  };
  ForwardBatch big, small, decodes3, decode1;
  big.sequences = {chunk(long_p, 0, true), chunk(d1, 30, true), chunk(short_p, 5, false),
                   chunk(d2, 50, true), chunk(d3, 2, true)};
  small.sequences = {chunk(d1, 3, true)};
  decodes3.sequences = {chunk(d1, 40, true), chunk(d2, 0, false), chunk(d3, 63, true)};
  decode1.sequences = {chunk(d2, 17, true)};
  struct Case {
    const ForwardBatch* batch;
    StepGraph graph;
  };
  const StepGraph eager = StepGraph::Eager();
  const std::vector<Case> steps = {
      {&big, eager},         {&small, eager},
      {&decodes3, StepGraph::Decode(8)},     {&decode1, StepGraph::Decode(2)},
      {&big, StepGraph::Piecewise(32)},      {&big, eager},
      {&decode1, StepGraph::Decode(1)},      {&small, StepGraph::Piecewise(16)},
      {&decodes3, StepGraph::Decode(4)},     {&decodes3, StepGraph::Piecewise(16)},
      {&small, eager},       {&big, StepGraph::Piecewise(64)},
      {&decodes3, eager},    {&big, eager}};
  StepInputs reused;
  std::vector<uint8_t> blob;  // grown only, as the backend's pinned staging buffer
  for (size_t i = 0; i < steps.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "step " << i << " kind "
                                      << static_cast<int>(steps[i].graph.kind) << " bucket "
                                      << steps[i].graph.bucket);
    StepInputs fresh;
    ASSERT_TRUE(fresh.Build(*steps[i].batch, limits, steps[i].graph).ok());
    ASSERT_TRUE(reused.Build(*steps[i].batch, limits, steps[i].graph).ok());
    const StepShape& a = reused.shape();
    const StepShape& b = fresh.shape();
    EXPECT_EQ(std::make_tuple(a.tokens, a.decode_items, a.prefill_seqs, a.tiles, a.tc_tiles,
                              a.logit_rows, a.table_entries),
              std::make_tuple(b.tokens, b.decode_items, b.prefill_seqs, b.tiles, b.tc_tiles,
                              b.logit_rows, b.table_entries));
    EXPECT_EQ(reused.max_decode_context(), fresh.max_decode_context());
    EXPECT_EQ(reused.upload_bytes(), fresh.upload_bytes());
    ASSERT_EQ(reused.output_rows().size(), fresh.output_rows().size());
    for (size_t r = 0; r < fresh.output_rows().size(); ++r) {
      EXPECT_EQ(reused.output_rows()[r].logits_row, fresh.output_rows()[r].logits_row);
      EXPECT_EQ(reused.output_rows()[r].sequence, fresh.output_rows()[r].sequence);
    }
    const StepLayout l = fresh.layout();
    if (blob.size() < l.total_bytes) blob.resize(l.total_bytes, 0xee);
    std::vector<uint8_t> clean(l.total_bytes, 0xee);
    reused.Pack(blob.data());
    fresh.Pack(clean.data());
    // Every array the kernels read (its element count from the fresh build) is the same.
    auto same = [&](size_t offset, size_t n, size_t elem, const char* name) {
      EXPECT_EQ(0, std::memcmp(blob.data() + offset, clean.data() + offset, n * elem)) << name;
    };
    same(l.slots, fresh.slots().size(), 8, "slots");
    same(l.token_ids, fresh.token_ids().size(), 4, "token_ids");
    same(l.positions, fresh.positions().size(), 4, "positions");
    same(l.dec_row, fresh.dec_row().size(), 4, "dec_row");
    same(l.dec_ctx, fresh.dec_ctx().size(), 4, "dec_ctx");
    same(l.dec_table, fresh.dec_table().size(), 4, "dec_table");
    same(l.pf_q_start, fresh.pf_q_start().size(), 4, "pf_q_start");
    same(l.pf_start_pos, fresh.pf_start_pos().size(), 4, "pf_start_pos");
    same(l.pf_num_tokens, fresh.pf_num_tokens().size(), 4, "pf_num_tokens");
    same(l.pf_table, fresh.pf_table().size(), 4, "pf_table");
    same(l.tile_seq, fresh.tile_seq().size(), 4, "tile_seq");
    same(l.tile_q_begin, fresh.tile_q_begin().size(), 4, "tile_q_begin");
    same(l.logit_rows, fresh.logit_rows().size(), 4, "logit_rows");
    same(l.tables, fresh.tables().size(), 4, "tables");
    // And the arrays' sizes match the shape the kernels are launched with.
    EXPECT_EQ(fresh.dec_ctx().size(), static_cast<size_t>(b.decode_items));
    EXPECT_EQ(fresh.tile_seq().size(), static_cast<size_t>(b.tiles));
    EXPECT_EQ(fresh.logit_rows().size(), static_cast<size_t>(b.logit_rows));
    EXPECT_EQ(reused.tables(), fresh.tables());
  }
}

// The StepBatch form (Backend::Step): chunks read the persistent table rows of their
// slots, a fork adds no chunk, nothing is packed for the tables; graph mode pads to the
// bucket with the same offsets.
TEST(StepInputsTest, StepBatchReadsPersistentTableRows) {
  StateCache cache(/*block_size=*/4, /*num_blocks=*/20, /*vocab_size=*/100);
  cache.Reset(1);
  StepPlan p;
  p.set_step_id(1);
  auto add = [&p](int64_t seq, std::vector<int32_t> tokens, int32_t computed,
                  std::vector<int32_t> blocks, int64_t parent) {
    ::weft::testing::AddNewSequence(&p, seq, tokens, static_cast<int32_t>(tokens.size()), blocks,
                                    SamplingConfig(), computed, parent);
  };
  add(1 << 8, {1, 2, 3, 4, 5, 6}, 0, {7, 9}, 0);  // prefill of 6 tokens
  add((1 << 8) + 1, {1, 2, 3, 4, 5, 6}, 6, {7, 9}, 1 << 8);  // its fork: no chunk
  add(2 << 8, {8, 9, 10}, 2, {3}, 0);  // one decode token at position 2
  StepBatch batch;
  ASSERT_TRUE(cache.Apply(p, &batch).ok()) << cache.Apply(p, &batch);
  SequenceSlots slots(/*max_blocks_per_seq=*/16);
  slots.Update(batch);
  StepInputs in;
  ASSERT_TRUE(in.Build(batch, slots, Limits(), StepGraph::Eager()).ok());
  EXPECT_EQ(in.num_tokens(), 7);
  EXPECT_EQ(in.pf_table(), std::vector<int32_t>{0});        // slot 0
  EXPECT_EQ(in.dec_table(), std::vector<int32_t>{2 * 16});  // slot 2 (the fork holds 1)
  EXPECT_EQ(in.slots(), (std::vector<int64_t>{28, 29, 30, 31, 36, 37, 14}));
  EXPECT_TRUE(in.tables().empty());
  EXPECT_EQ(in.shape().table_entries, 0);
  ASSERT_EQ(in.output_rows().size(), 2u);
  EXPECT_EQ(in.output_rows()[0].sequence, 0);
  EXPECT_EQ(in.output_rows()[1].sequence, 2);
  EXPECT_EQ(in.logit_rows(), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(StepInputs::NumChunks(batch), 2);
  EXPECT_EQ(StepInputs::NumTokens(batch), 7);
  EXPECT_FALSE(StepInputs::AllDecode(batch));
  {
    // The same mixed step on piecewise graphs: 16 tokens, the padding writes no KV.
    StepInputs pw;
    ASSERT_TRUE(pw.Build(batch, slots, Limits(), StepGraph::Piecewise(16)).ok());
    std::vector<int64_t> padded = {28, 29, 30, 31, 36, 37, 14};
    padded.resize(16, -1);
    EXPECT_EQ(pw.slots(), padded);
    EXPECT_EQ(pw.logit_rows(), (std::vector<int32_t>{5, 6}));
    EXPECT_EQ(pw.shape().table_entries, 0);
    EXPECT_EQ(pw.dec_table(), in.dec_table());
  }
  // The next step: both decode, in graph mode (bucket 4).
  for (const ScheduledSequence& sc : batch.sequences) cache.AppendSampled(sc.state, 11);
  StepPlan d;
  d.set_step_id(2);
  for (int64_t seq : {int64_t{1 << 8}, int64_t{2 << 8}}) {
    auto* c = d.add_cached_sequences();
    c->set_seq_id(seq);
    c->set_num_computed_tokens(cache.Find(seq)->num_computed_tokens);
    c->set_num_scheduled_tokens(1);
    c->set_do_sample(true);
    d.set_num_scheduled_tokens(d.num_scheduled_tokens() + 1);
    d.set_num_sampled(d.num_sampled() + 1);
  }
  ASSERT_TRUE(cache.Apply(d, &batch).ok()) << cache.Apply(d, &batch);
  slots.Update(batch);
  ASSERT_TRUE(in.Build(batch, slots, Limits(), StepGraph::Decode(4)).ok());
  EXPECT_EQ(in.dec_table(), (std::vector<int32_t>{0, 2 * 16, 0, 0}));
  EXPECT_EQ(in.dec_ctx(), (std::vector<int32_t>{7, 4, 0, 0}));
  EXPECT_EQ(in.shape().table_entries, 0);
  EXPECT_EQ(in.layout().tables, in.layout().total_bytes);
}

}  // namespace
}  // namespace weft::cuda_backend

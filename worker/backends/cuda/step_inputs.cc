#include "worker/backends/cuda/step_inputs.h"

#include <algorithm>
#include <cstring>


namespace weft::cuda_backend {
namespace {

size_t Align16(size_t x) { return (x + 15) / 16 * 16; }

template <typename T>
void Put(void* blob, size_t offset, const std::vector<T>& v) {
  if (!v.empty()) std::memcpy(static_cast<char*>(blob) + offset, v.data(), v.size() * sizeof(T));
}

}  // namespace

int32_t PowerOfTwoBucket(int32_t n) {
  int32_t b = 1;
  while (b < n) b *= 2;
  return b;
}

int32_t TokenBucket(int64_t tokens, int32_t max_graph_tokens) {
  if (tokens > max_graph_tokens) return 0;
  const int32_t b = PowerOfTwoBucket(std::max(static_cast<int32_t>(tokens), kMinTokenBucket));
  return b <= max_graph_tokens ? b : 0;
}

int32_t RowBucket(int32_t rows) { return rows > 0 ? PowerOfTwoBucket(rows) : 0; }

StepGraph ChooseStepGraph(const GraphPolicy& policy, int32_t chunks, int64_t tokens,
                          bool all_decode) {
  if (!policy.graphs || chunks == 0) return StepGraph::Eager();
  if (all_decode && chunks <= policy.max_graph_batch) {
    return StepGraph::Decode(PowerOfTwoBucket(chunks));
  }
  if (policy.mixed) {
    if (const int32_t b = TokenBucket(tokens, policy.max_graph_tokens); b > 0) {
      return StepGraph::Piecewise(b);
    }
  }
  return StepGraph::Eager();
}

StepLayout StepLayout::For(const StepShape& s) {
  StepLayout l;
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    const size_t here = at;
    at = Align16(at + bytes);
    return here;
  };
  l.slots = take(sizeof(int64_t) * s.tokens);
  l.token_ids = take(sizeof(int32_t) * s.tokens);
  l.positions = take(sizeof(int32_t) * s.tokens);
  l.logit_rows = take(sizeof(int32_t) * s.logit_rows);
  l.dec_row = take(sizeof(int32_t) * s.decode_items);
  l.dec_ctx = take(sizeof(int32_t) * s.decode_items);
  l.dec_table = take(sizeof(int32_t) * s.decode_items);
  l.pf_q_start = take(sizeof(int32_t) * s.prefill_seqs);
  l.pf_start_pos = take(sizeof(int32_t) * s.prefill_seqs);
  l.pf_num_tokens = take(sizeof(int32_t) * s.prefill_seqs);
  l.pf_table = take(sizeof(int32_t) * s.prefill_seqs);
  l.tile_seq = take(sizeof(int32_t) * s.tiles);
  l.tile_q_begin = take(sizeof(int32_t) * s.tiles);
  l.tables = take(sizeof(int32_t) * s.table_entries);
  l.total_bytes = at;
  return l;
}

bool StepInputs::AllDecode(const ForwardBatch& batch) {
  for (const SequenceChunk& s : batch.sequences) {
    if (s.token_ids.size() != 1) return false;
  }
  return true;
}

void StepInputs::Clear() {
  shape_ = StepShape();
  max_decode_context_ = 0;
  for (auto* v : {&token_ids_, &positions_, &dec_row_, &dec_ctx_, &dec_table_, &pf_q_start_,
                  &pf_start_pos_, &pf_num_tokens_, &pf_table_, &tile_seq_, &tile_q_begin_,
                  &tc_tile_seq_, &tc_tile_q_begin_, &logit_rows_, &tables_}) {
    v->clear();
  }
  slots_.clear();
  output_rows_.clear();
}

absl::Status StepInputs::CheckFits(StepGraph graph, bool all_decode, int32_t chunks,
                                   int64_t tokens) {
  if (graph.kind == StepGraph::Kind::kDecode && (!all_decode || chunks > graph.bucket)) {
    return absl::InternalError("graph mode needs at most one decode token per bucket slot");
  }
  if (graph.kind == StepGraph::Kind::kPiecewise && tokens > graph.bucket) {
    return absl::InternalError("piecewise graphs need at most their bucket of tokens");
  }
  return absl::OkStatus();
}

int64_t StepInputs::NumTokens(const ForwardBatch& batch) {
  int64_t n = 0;
  for (const SequenceChunk& s : batch.sequences) n += static_cast<int64_t>(s.token_ids.size());
  return n;
}

int64_t StepInputs::NumTokens(const StepBatch& batch) {
  int64_t n = 0;
  for (const ScheduledSequence& sc : batch.sequences) n += sc.num_tokens;
  return n;
}

absl::Status StepInputs::Build(const ForwardBatch& batch, const StepLimits& limits,
                               StepGraph graph) {
  Clear();
  const BatchLimits checked{limits.context_length, limits.vocab_size, limits.block_size,
                           limits.num_blocks};
  if (absl::Status s = ValidateBatch(batch, checked); !s.ok()) return s;
  const int32_t num_seqs = static_cast<int32_t>(batch.sequences.size());
  if (absl::Status s = CheckFits(graph, AllDecode(batch), num_seqs, NumTokens(batch)); !s.ok()) {
    return s;
  }
  int32_t t = 0;
  for (int32_t s = 0; s < num_seqs; ++s) {
    const SequenceChunk& seq = batch.sequences[s];
    AddChunk(seq.token_ids, seq.start_pos, seq.block_table, seq.num_logit_rows(),
             /*table_offset=*/-1, s, limits, graph.decode_bucket(), &t);
  }
  Finish(num_seqs, limits, graph, t, /*packed_tables=*/true);
  return absl::OkStatus();
}

bool StepInputs::AllDecode(const StepBatch& batch) {
  for (const ScheduledSequence& sc : batch.sequences) {
    if (sc.num_tokens > 1) return false;
  }
  return true;
}

int32_t StepInputs::NumChunks(const StepBatch& batch) {
  int32_t n = 0;
  for (const ScheduledSequence& sc : batch.sequences) n += sc.num_tokens > 0 ? 1 : 0;
  return n;
}

absl::Status StepInputs::Build(const StepBatch& batch, const SequenceSlots& slots,
                               const StepLimits& limits, StepGraph graph) {
  Clear();
  const int32_t chunks = NumChunks(batch);
  if (absl::Status s = CheckFits(graph, AllDecode(batch), chunks, NumTokens(batch)); !s.ok()) {
    return s;
  }
  const int32_t row_stride = slots.max_blocks_per_seq();
  int32_t t = 0;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const ScheduledSequence& sc = batch.sequences[i];
    if (sc.num_tokens == 0) continue;  // a fork: samples from its parent's row
    const auto tokens = absl::MakeConstSpan(sc.state->tokens).subspan(sc.start_pos, sc.num_tokens);
    AddChunk(tokens, sc.start_pos, sc.state->block_ids, sc.sample ? 1 : 0,
             slots.slot(i) * row_stride, static_cast<int32_t>(i), limits, graph.decode_bucket(),
             &t);
  }
  Finish(chunks, limits, graph, t, /*packed_tables=*/false);
  return absl::OkStatus();
}

void StepInputs::AddChunk(absl::Span<const int32_t> token_ids, int32_t start_pos,
                          absl::Span<const int32_t> block_table, int32_t num_logits,
                          int32_t table_offset, int32_t seq_index, const StepLimits& limits,
                          int32_t decode_bucket, int32_t* t_io) {
  const int32_t bs = limits.block_size;
  int32_t t = *t_io;
  const int32_t n = static_cast<int32_t>(token_ids.size());
  const int32_t end = start_pos + n;
  if (table_offset < 0) {  // packed into this step's tables
    table_offset = static_cast<int32_t>(tables_.size());
    tables_.insert(tables_.end(), block_table.begin(), block_table.begin() + (end + bs - 1) / bs);
  }
  for (int32_t i = 0; i < n; ++i) {
    const int32_t pos = start_pos + i;
    token_ids_.push_back(token_ids[i]);
    positions_.push_back(pos);
    slots_.push_back(int64_t{block_table[pos / bs]} * bs + pos % bs);
  }
  if (n == 1) {
    dec_row_.push_back(t);
    dec_ctx_.push_back(end);
    dec_table_.push_back(table_offset);
    max_decode_context_ = std::max(max_decode_context_, end);
  } else {
    const int32_t p = static_cast<int32_t>(pf_q_start_.size());
    pf_q_start_.push_back(t);
    pf_start_pos_.push_back(start_pos);
    pf_num_tokens_.push_back(n);
    pf_table_.push_back(table_offset);
    const bool tc = limits.prefill_tc_tile_tokens > 0 && n >= limits.prefill_tc_min_tokens;
    const int32_t tile_tokens = tc ? limits.prefill_tc_tile_tokens : limits.prefill_tile_tokens;
    for (int32_t q = 0; q < n; q += tile_tokens) {
      (tc ? tc_tile_seq_ : tile_seq_).push_back(p);
      (tc ? tc_tile_q_begin_ : tile_q_begin_).push_back(q);
    }
  }
  t += n;
  // The chunk's last num_logits tokens, in order; graph mode only runs decodes (one token).
  for (int32_t i = num_logits; i > 0; --i) {
    const int32_t row = decode_bucket > 0 ? t - i : static_cast<int32_t>(logit_rows_.size());
    if (decode_bucket == 0) logit_rows_.push_back(t - i);
    output_rows_.push_back({row, seq_index});
  }
  *t_io = t;
}

void StepInputs::Finish(int32_t num_chunks, const StepLimits& limits, StepGraph graph,
                        int32_t tokens, bool packed_tables) {
  if (graph.kind == StepGraph::Kind::kDecode) {
    PadDecodeItems(num_chunks, limits, graph.bucket, packed_tables);
    return;
  }
  shape_.tokens = tokens;
  shape_.decode_items = static_cast<int32_t>(dec_row_.size());
  shape_.prefill_seqs = static_cast<int32_t>(pf_q_start_.size());
  shape_.tc_tiles = static_cast<int32_t>(tc_tile_seq_.size());
  tile_seq_.insert(tile_seq_.end(), tc_tile_seq_.begin(), tc_tile_seq_.end());
  tile_q_begin_.insert(tile_q_begin_.end(), tc_tile_q_begin_.begin(), tc_tile_q_begin_.end());
  shape_.tiles = static_cast<int32_t>(tile_seq_.size());
  shape_.logit_rows = static_cast<int32_t>(logit_rows_.size());
  shape_.table_entries = static_cast<int32_t>(tables_.size());
  if (graph.kind == StepGraph::Kind::kPiecewise) PadTokens(tokens, graph.bucket);
}

void StepInputs::PadDecodeItems(int32_t num_chunks, const StepLimits& limits, int32_t bucket,
                                bool packed_tables) {
  for (int32_t i = num_chunks; i < bucket; ++i) {  // padding items
    token_ids_.push_back(0);
    positions_.push_back(0);
    slots_.push_back(-1);
    dec_row_.push_back(i);
    dec_ctx_.push_back(0);
    dec_table_.push_back(0);
  }
  logit_rows_.clear();
  for (int32_t i = 0; i < bucket; ++i) logit_rows_.push_back(i);
  shape_.tokens = bucket;
  shape_.decode_items = bucket;
  shape_.logit_rows = bucket;
  shape_.table_entries = packed_tables ? bucket * limits.max_blocks_per_seq() : 0;
}

void StepInputs::PadTokens(int32_t tokens, int32_t token_bucket) {
  for (int32_t t = tokens; t < token_bucket; ++t) {  // in no decode item and no tile
    token_ids_.push_back(0);
    positions_.push_back(0);
    slots_.push_back(-1);
  }
  const int32_t rows = RowBucket(shape_.logit_rows);
  logit_rows_.resize(rows, 0);  // padding rows normalize token row 0; dropped
  shape_.tokens = token_bucket;
  shape_.logit_rows = rows;
}

void StepInputs::Pack(void* blob) const {
  const StepLayout l = layout();
  Put(blob, l.slots, slots_);
  Put(blob, l.token_ids, token_ids_);
  Put(blob, l.positions, positions_);
  Put(blob, l.dec_row, dec_row_);
  Put(blob, l.dec_ctx, dec_ctx_);
  Put(blob, l.dec_table, dec_table_);
  Put(blob, l.pf_q_start, pf_q_start_);
  Put(blob, l.pf_start_pos, pf_start_pos_);
  Put(blob, l.pf_num_tokens, pf_num_tokens_);
  Put(blob, l.pf_table, pf_table_);
  Put(blob, l.tile_seq, tile_seq_);
  Put(blob, l.tile_q_begin, tile_q_begin_);
  Put(blob, l.logit_rows, logit_rows_);
  Put(blob, l.tables, tables_);
}

}  // namespace weft::cuda_backend

// StepInputs: the host side of one CUDA forward pass — a ForwardBatch validated (or a
// StepBatch, validated by the StateCache) and flattened into the index arrays the kernels
// read, packed into one blob so that a step costs a single host-to-device copy of them.
// Plain C++ (no CUDA): tested in every build.
//
// Flattening (token t = the t-th token of the batch in sequence order):
//   token_ids[t], positions[t], slots[t] = block_table[p / B] * B + p % B   (int64)
//   decode items  = chunks of one token: row (its token), context (start_pos + 1), the
//                   offset of its block table in `tables`
//   prefill seqs  = longer chunks: first token row, start_pos, length, table offset,
//                   cut into tiles of `prefill_tile_tokens` query tokens (the CUDA-core
//                   kernel), or, for chunks of at least prefill_tc_min_tokens tokens when
//                   prefill_tc_tile_tokens > 0, of prefill_tc_tile_tokens (the tensor-core
//                   kernel); the tensor-core tiles come last (StepShape::tc_tiles of them)
//   logit rows    = the last token of every chunk that wants logits (its last num_logits
//                   tokens when set), in batch order
// How the step runs (StepGraph, chosen by ChooseStepGraph) decides the padding:
// * decode graph (StepGraph::kDecode, bucket B): every chunk has one token and the batch
//   is padded to exactly B items, item i = token i = logits row i; padding items read
//   token 0 at position 0, write no KV (slot -1) and attend to nothing (context 0), and
//   their logits are dropped. The blob then always has the same layout for a bucket, so
//   a CUDA graph captured once for the bucket reads every later step's inputs at the
//   same device addresses.
// * piecewise graphs (StepGraph::kPiecewise, token bucket TB): the T tokens are padded to
//   TB (token 0 at position 0, slot -1: no KV write; in no decode item and no prefill
//   tile, so no attention reads or writes their rows) and the R logits rows to
//   RowBucket(R) (padding rows read token row 0; their logits are dropped). Only the
//   arrays the captured pieces read (slots, token_ids, positions, logit_rows) must keep
//   their offsets per (TB, row bucket): they come first in the blob; the attention
//   arrays after them have this step's real sizes (attention is launched eagerly).
//
// Ownership: a value type; reuse one across steps (vectors keep their capacity).
// Thread-safety: none (the rank's step thread).
#ifndef WEFT_WORKER_BACKENDS_CUDA_STEP_INPUTS_H_
#define WEFT_WORKER_BACKENDS_CUDA_STEP_INPUTS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/plan/state_cache.h"
#include "worker/backends/cuda/sequence_slots.h"
#include "worker/model/forward_batch.h"

namespace weft::cuda_backend {

struct StepLimits {
  int32_t block_size = 16;
  int32_t num_blocks = 0;
  int32_t context_length = 0;
  int32_t vocab_size = 0;
  int32_t prefill_tile_tokens = 1;
  int32_t prefill_tc_tile_tokens = 0;  // 0: every prefill chunk on the CUDA-core kernel
  int32_t prefill_tc_min_tokens = 128;

  int32_t max_blocks_per_seq() const { return (context_length + block_size - 1) / block_size; }
};

// Graph buckets are powers of two: the smallest >= n (n >= 1).
int32_t PowerOfTwoBucket(int32_t n);

// Piecewise token buckets start at kMinTokenBucket (16, 32, ..., --max_graph_tokens).
inline constexpr int32_t kMinTokenBucket = 16;

// How a step's forward pass runs, and so how StepInputs pads it (see above).
struct StepGraph {
  enum class Kind { kEager, kDecode, kPiecewise };
  Kind kind = Kind::kEager;
  int32_t bucket = 0;  // kDecode: decode items; kPiecewise: tokens

  static StepGraph Eager() { return {}; }
  static StepGraph Decode(int32_t items) { return {Kind::kDecode, items}; }
  static StepGraph Piecewise(int32_t tokens) { return {Kind::kPiecewise, tokens}; }
  int32_t decode_bucket() const { return kind == Kind::kDecode ? bucket : 0; }
  int32_t token_bucket() const { return kind == Kind::kPiecewise ? bucket : 0; }
};

// Which steps run as graphs (the backend's options).
struct GraphPolicy {
  bool graphs = false;          // CUDA graphs on (--cuda_graphs, TP = 1)
  int32_t max_graph_batch = 0;  // largest decode-graph bucket
  bool mixed = false;           // piecewise graphs for the other steps (--graph_mixed_steps)
  int32_t max_graph_tokens = 0; // largest piecewise token bucket
};

// The token bucket of a T-token step: the smallest power of two >= max(T, 16), or 0
// (eager) when that is over max_graph_tokens.
int32_t TokenBucket(int64_t tokens, int32_t max_graph_tokens);
// The logits-row bucket of a piecewise step: 0 without rows, else the smallest power of
// two >= rows (<= its token bucket, as rows <= tokens).
int32_t RowBucket(int32_t rows);
// A step of `chunks` chunks and `tokens` tokens: a decode graph when every chunk is one
// token and there are at most max_graph_batch of them; else piecewise graphs when mixed
// and its token bucket is within max_graph_tokens; else eager (and always eager without
// graphs or chunks).
StepGraph ChooseStepGraph(const GraphPolicy& policy, int32_t chunks, int64_t tokens,
                          bool all_decode);

// Element counts of each array of the blob (capacities).
struct StepShape {
  int32_t tokens = 0;
  int32_t decode_items = 0;
  int32_t prefill_seqs = 0;
  int32_t tiles = 0;
  int32_t tc_tiles = 0;  // the last tc_tiles of the tiles are tensor-core tiles
  int32_t logit_rows = 0;
  int32_t table_entries = 0;
};

// Byte offsets of the arrays inside the blob laid out for a StepShape (each 16-byte
// aligned; slots first, as the only int64 array; the arrays a piecewise graph captures —
// slots, token_ids, positions, logit_rows — before every other, so that their offsets
// depend on tokens and logit_rows only).
struct StepLayout {
  size_t slots = 0, token_ids = 0, positions = 0;
  size_t logit_rows = 0;
  size_t dec_row = 0, dec_ctx = 0, dec_table = 0;
  size_t pf_q_start = 0, pf_start_pos = 0, pf_num_tokens = 0, pf_table = 0;
  size_t tile_seq = 0, tile_q_begin = 0;
  size_t tables = 0;
  size_t total_bytes = 0;

  static StepLayout For(const StepShape& shape);
};

// Where output row r of ForwardOutput comes from.
struct OutputRow {
  int32_t logits_row = 0;  // row of the device logits buffer
  int32_t sequence = 0;    // index in batch.sequences
};

class StepInputs {
 public:
  // Validates `batch` (InvalidArgument, naming the sequence, for an empty chunk, a
  // position past the context length, a token id outside the vocabulary, a block table
  // too short or a block id out of range) and flattens it, padded for `graph` (a decode
  // graph: every chunk one token, at most its bucket of them; piecewise: at most its
  // bucket of tokens — InternalError otherwise).
  absl::Status Build(const ForwardBatch& batch, const StepLimits& limits, StepGraph graph);

  // Whether a batch can run in graph mode: every chunk one token.
  static bool AllDecode(const ForwardBatch& batch);

  // Backend::Step's form: the StepBatch's chunks (entries with num_tokens > 0; a fork has
  // none), already validated by the StateCache (the Backend contract: not checked again).
  // Block tables are the device's persistent rows (SequenceSlots, already updated for
  // this batch): entry i's chunk reads the row at slots.slot(i) * max_blocks_per_seq and
  // no tables are packed (table_entries 0). A sampled entry's chunk has one output row
  // (OutputRow::sequence = its index in batch.sequences).
  absl::Status Build(const StepBatch& batch, const SequenceSlots& slots,
                     const StepLimits& limits, StepGraph graph);
  static bool AllDecode(const StepBatch& batch);
  static int32_t NumChunks(const StepBatch& batch);
  // Tokens of a batch's chunks (int64: a ForwardBatch is not validated yet).
  static int64_t NumTokens(const ForwardBatch& batch);
  static int64_t NumTokens(const StepBatch& batch);

  // Counts of this step (padded ones: the buckets') and the layout to pack them with.
  const StepShape& shape() const { return shape_; }
  StepLayout layout() const { return StepLayout::For(shape_); }
  // Writes the arrays into `blob` (layout().total_bytes bytes). Only the first
  // upload_bytes() of it carry data (the block tables come last and are usually much
  // shorter than their graph-mode capacity).
  void Pack(void* blob) const;
  size_t upload_bytes() const { return layout().tables + tables_.size() * sizeof(int32_t); }

  int32_t num_tokens() const { return shape_.tokens; }
  int32_t max_decode_context() const { return max_decode_context_; }
  const std::vector<OutputRow>& output_rows() const { return output_rows_; }

  // The arrays, for tests.
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  const std::vector<int32_t>& positions() const { return positions_; }
  const std::vector<int64_t>& slots() const { return slots_; }
  const std::vector<int32_t>& dec_row() const { return dec_row_; }
  const std::vector<int32_t>& dec_ctx() const { return dec_ctx_; }
  const std::vector<int32_t>& dec_table() const { return dec_table_; }
  const std::vector<int32_t>& pf_q_start() const { return pf_q_start_; }
  const std::vector<int32_t>& pf_start_pos() const { return pf_start_pos_; }
  const std::vector<int32_t>& pf_num_tokens() const { return pf_num_tokens_; }
  const std::vector<int32_t>& pf_table() const { return pf_table_; }
  const std::vector<int32_t>& tile_seq() const { return tile_seq_; }
  const std::vector<int32_t>& tile_q_begin() const { return tile_q_begin_; }
  const std::vector<int32_t>& logit_rows() const { return logit_rows_; }
  const std::vector<int32_t>& tables() const { return tables_; }

 private:
  void Clear();
  // Flattens one chunk (table_offset < 0: its table is packed into tables_); *t is the
  // batch's token count so far.
  void AddChunk(absl::Span<const int32_t> token_ids, int32_t start_pos,
                absl::Span<const int32_t> block_table, int32_t num_logits, int32_t table_offset,
                int32_t seq_index, const StepLimits& limits, int32_t decode_bucket, int32_t* t);
  // InternalError unless a batch of `chunks` chunks and `tokens` tokens fits `graph`.
  static absl::Status CheckFits(StepGraph graph, bool all_decode, int32_t chunks,
                                int64_t tokens);
  // Padding (graph modes) and the shape.
  void Finish(int32_t num_chunks, const StepLimits& limits, StepGraph graph, int32_t tokens,
              bool packed_tables);
  void PadDecodeItems(int32_t num_chunks, const StepLimits& limits, int32_t bucket,
                      bool packed_tables);
  void PadTokens(int32_t tokens, int32_t token_bucket);

  StepShape shape_;
  int32_t max_decode_context_ = 0;
  std::vector<int32_t> token_ids_, positions_;
  std::vector<int64_t> slots_;
  std::vector<int32_t> dec_row_, dec_ctx_, dec_table_;
  std::vector<int32_t> pf_q_start_, pf_start_pos_, pf_num_tokens_, pf_table_;
  std::vector<int32_t> tile_seq_, tile_q_begin_;
  std::vector<int32_t> tc_tile_seq_, tc_tile_q_begin_;  // appended to the tiles at the end
  std::vector<int32_t> logit_rows_;
  std::vector<int32_t> tables_;
  std::vector<OutputRow> output_rows_;
};

}  // namespace weft::cuda_backend

#endif  // WEFT_WORKER_BACKENDS_CUDA_STEP_INPUTS_H_

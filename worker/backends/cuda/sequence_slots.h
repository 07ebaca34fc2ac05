// SequenceSlots: the host's record of the per-sequence state the CUDA backend keeps on the
// device between steps, and the diff each StepBatch makes to it. Plain C++ (no CUDA):
// tested in every build.
//
// Device state per held sequence:
//   * a slot: row `slot` of the persistent block tables, int32 [slots][max_blocks_per_seq]
//     (the attention kernels read a sequence's table at slot * max_blocks_per_seq);
//   * for a sequence whose sampling has penalties, a count row: int32 [rows][vocab], token t
//     holding kCountSeen if it occurs in the prompt or output, plus its number of output
//     occurrences (the sampling kernel reads it instead of the token history, and adds the
//     token it samples itself).
// Update(batch) applies a step's diff in this order:
//   1. every dropped sequence (finished or preempted) frees its slot and count row;
//   2. every entry: a new one (ScheduledSequence::is_new, or a sequence not held here, e.g.
//      after Clear) gets its whole block table uploaded and, with penalties, its count row
//      zeroed and every token of its history marked; a held one only its appended blocks
//      (block tables only grow while held, StateCache) and the history tokens not yet
//      counted (none in steady state: the device counted the last sample itself).
// Sampled(batch) then records that the device appended each sampled token to its count
// row, so the host appending the same token (StateCache::AppendSampled) uploads nothing.
// Blocks past max_blocks_per_seq are never read (positions stop at the context length)
// and are not uploaded. Slots and count rows are reused lowest-freed-first; their high
// water marks (num_slots, num_count_rows) size the device arrays.
// Clear(): the device state is unknown (a failed step, a new attachment): the next step
// treats every entry as new.
//
// Ownership: a value type. Thread-safety: none (the rank's step thread).
#ifndef WEFT_WORKER_BACKENDS_CUDA_SEQUENCE_SLOTS_H_
#define WEFT_WORKER_BACKENDS_CUDA_SEQUENCE_SLOTS_H_

#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/plan/state_cache.h"

namespace weft::cuda_backend {

// Block ids [first, first + count) of an entry's block table, to row `slot` of the device
// tables at the same positions.
struct TableUpload {
  int32_t entry = 0;  // index in StepBatch::sequences
  int32_t slot = 0;
  int32_t first = 0;
  int32_t count = 0;
};

// History tokens [first, end) of an entry (prompt tokens mark seen, output tokens count
// too) to mark in count row `row`.
struct CountUpload {
  int32_t entry = 0;
  int32_t row = 0;
  int32_t first = 0;
  int32_t end = 0;
};

class SequenceSlots {
 public:
  explicit SequenceSlots(int32_t max_blocks_per_seq) : max_blocks_(max_blocks_per_seq) {}

  void Update(const StepBatch& batch);
  void Sampled(const StepBatch& batch);
  void Clear();

  // Of batch entry i of the last Update.
  int32_t slot(size_t entry) const { return entry_slot_[entry]; }
  int32_t count_row(size_t entry) const { return entry_count_row_[entry]; }

  // The last Update's diff.
  const std::vector<TableUpload>& table_uploads() const { return table_uploads_; }
  const std::vector<int32_t>& zeroed_count_rows() const { return zeroed_rows_; }
  const std::vector<CountUpload>& count_uploads() const { return count_uploads_; }
  int32_t table_entries_uploaded() const { return table_entries_; }
  // The last Update's diff as the device kernels take it (appended to *out):
  //   (flat index slot * max_blocks_per_seq + position, block id) pairs
  //   (kernels/cuda/paged_kv.h UpdateBlockTables);
  //   (count row, token, is_output) triples (kernels/cuda/sampling.h UpdateCounts).
  // `batch` is the one given to Update.
  void TablePairs(const StepBatch& batch, std::vector<int32_t>* out) const;
  void CountMarks(const StepBatch& batch, std::vector<int32_t>* out) const;
  int32_t count_tokens_uploaded() const { return count_tokens_; }

  int32_t num_slots() const { return slots_.high(); }
  int32_t num_count_rows() const { return rows_.high(); }
  int32_t max_blocks_per_seq() const { return max_blocks_; }
  size_t num_held() const { return held_.size(); }

 private:
  // Integer ids handed out lowest-freed-first.
  class IdPool {
   public:
    int32_t Take();
    void Give(int32_t id) { free_.push(id); }
    int32_t high() const { return next_; }
    void Clear() {
      next_ = 0;
      free_ = {};
    }

   private:
    int32_t next_ = 0;
    std::priority_queue<int32_t, std::vector<int32_t>, std::greater<int32_t>> free_;
  };
  struct Held {
    int32_t slot = -1;
    int32_t count_row = -1;
    int32_t blocks = 0;   // table entries on the device
    int32_t counted = 0;  // history tokens in the count row
  };
  void Drop(int64_t seq_id);

  int32_t max_blocks_;  // not const: the owner assigns a sized one
  absl::flat_hash_map<int64_t, Held> held_;
  IdPool slots_, rows_;
  std::vector<int32_t> entry_slot_, entry_count_row_;
  std::vector<TableUpload> table_uploads_;
  std::vector<int32_t> zeroed_rows_;
  std::vector<CountUpload> count_uploads_;
  int32_t table_entries_ = 0, count_tokens_ = 0;
};

}  // namespace weft::cuda_backend

#endif  // WEFT_WORKER_BACKENDS_CUDA_SEQUENCE_SLOTS_H_

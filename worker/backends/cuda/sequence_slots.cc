#include "worker/backends/cuda/sequence_slots.h"

#include <algorithm>


namespace weft::cuda_backend {

int32_t SequenceSlots::IdPool::Take() {
  if (free_.empty()) return next_++;
  const int32_t id = free_.top();
  free_.pop();
  return id;
}

void SequenceSlots::Clear() {
  held_.clear();
  slots_.Clear();
  rows_.Clear();
}

void SequenceSlots::Drop(int64_t seq_id) {
  auto it = held_.find(seq_id);
  if (it == held_.end()) return;
  slots_.Give(it->second.slot);
  if (it->second.count_row >= 0) rows_.Give(it->second.count_row);
  held_.erase(it);
}

void SequenceSlots::Update(const StepBatch& batch) {
  table_uploads_.clear();
  zeroed_rows_.clear();
  count_uploads_.clear();
  table_entries_ = count_tokens_ = 0;
  for (int64_t id : batch.dropped_seq_ids) Drop(id);
  const size_t n = batch.sequences.size();
  entry_slot_.assign(n, -1);
  entry_count_row_.assign(n, -1);
  for (size_t i = 0; i < n; ++i) {
    const ScheduledSequence& sc = batch.sequences[i];
    const WorkerSequence& seq = *sc.state;
    auto [it, inserted] = held_.try_emplace(seq.seq_id);
    Held& h = it->second;
    if (inserted) h.slot = slots_.Take();
    if (sc.is_new) h.blocks = h.counted = 0;  // a re-admission replaces the state
    const int32_t blocks =
        std::min(static_cast<int32_t>(seq.block_ids.size()), max_blocks_);
    if (blocks < h.blocks) h.blocks = 0;  // tables only grow while held: start over
    if (blocks > h.blocks) {
      const int32_t entry = static_cast<int32_t>(i);
      table_uploads_.push_back({entry, h.slot, h.blocks, blocks - h.blocks});
      table_entries_ += blocks - h.blocks;
      h.blocks = blocks;
    }
    if (seq.sampling.has_penalties()) {
      const int32_t tokens = static_cast<int32_t>(seq.tokens.size());
      if (h.count_row < 0 || sc.is_new || tokens < h.counted) {
        if (h.count_row < 0) h.count_row = rows_.Take();
        zeroed_rows_.push_back(h.count_row);
        h.counted = 0;
      }
      if (tokens > h.counted) {
        count_uploads_.push_back({static_cast<int32_t>(i), h.count_row, h.counted, tokens});
        count_tokens_ += tokens - h.counted;
        h.counted = tokens;
      }
    } else if (h.count_row >= 0) {  // a re-admission without penalties
      rows_.Give(h.count_row);
      h.count_row = -1;
    }
    entry_slot_[i] = h.slot;
    entry_count_row_[i] = h.count_row;
  }
}

void SequenceSlots::TablePairs(const StepBatch& batch, std::vector<int32_t>* out) const {
  for (const TableUpload& u : table_uploads_) {
    const std::vector<int32_t>& ids = batch.sequences[u.entry].state->block_ids;
    for (int32_t b = u.first; b < u.first + u.count; ++b) {
      out->push_back(u.slot * max_blocks_ + b);
      out->push_back(ids[b]);
    }
  }
}

void SequenceSlots::CountMarks(const StepBatch& batch, std::vector<int32_t>* out) const {
  for (const CountUpload& u : count_uploads_) {
    const WorkerSequence& seq = *batch.sequences[u.entry].state;
    for (int32_t t = u.first; t < u.end; ++t) {
      out->push_back(u.row);
      out->push_back(seq.tokens[t]);
      out->push_back(t >= seq.num_prompt_tokens ? 1 : 0);
    }
  }
}

void SequenceSlots::Sampled(const StepBatch& batch) {
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    if (!batch.sequences[i].sample || entry_count_row_[i] < 0) continue;
    auto it = held_.find(batch.sequences[i].state->seq_id);
    if (it != held_.end()) ++it->second.counted;
  }
}

}  // namespace weft::cuda_backend

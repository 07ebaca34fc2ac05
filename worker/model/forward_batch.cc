#include "worker/model/forward_batch.h"

#include "absl/strings/str_cat.h"

namespace weft {

absl::Status ValidateBatch(const ForwardBatch& batch, const BatchLimits& limits) {
  const int64_t bs = limits.block_size;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceChunk& seq = batch.sequences[s];
    const int64_t n = static_cast<int64_t>(seq.token_ids.size());
    const int64_t end = int64_t{seq.start_pos} + n;
    if (n == 0 || seq.start_pos < 0 || end > limits.context_length) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", s, ": chunk of ", n, " tokens at position ", seq.start_pos,
          " (need 1 or more tokens within the context length ", limits.context_length, ")"));
    }
    for (int32_t id : seq.token_ids) {
      if (id < 0 || id >= limits.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequence ", s, ": token id ", id, " outside the vocabulary"));
      }
    }
    const int64_t blocks_needed = (end + bs - 1) / bs;
    if (static_cast<int64_t>(seq.block_table.size()) < blocks_needed) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, ": block table of ",
                                                     seq.block_table.size(), " blocks, ",
                                                     blocks_needed, " needed"));
    }
    for (int64_t b = 0; b < blocks_needed; ++b) {
      if (seq.block_table[b] < 0 || seq.block_table[b] >= limits.num_blocks) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequence ", s, ": block id ", seq.block_table[b], " out of range"));
      }
    }
    if (seq.num_logits < 0) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, ": negative num_logits"));
    }
  }
  return absl::OkStatus();
}

}  // namespace weft

// ShardLayout: how a tensor-parallel rank's slice of a Llama model is cut.
//
// One function, used by workers (to load their shard) and by the scheduler (to check that
// the ranks of a replica hold complementary shards), so both always agree.
//   - attention by KV groups: rank r owns KV heads [kv_begin, kv_end) and the query heads
//     that share them ([kv_begin * group, kv_end * group), group = n_head / n_head_kv);
//     uneven counts go to the lower ranks first (3 KV heads on 2 ranks: 2 + 1);
//   - FFN columns [ff_begin, ff_end) split as evenly as they go in units of 32 (the
//     quantization block, so a row-parallel projection's K slice never cuts a block);
//     vocabulary rows [vocab_begin, vocab_end) in units of 16 (a weight panel).
// Thread-safety: value types and pure functions.
#ifndef WEFT_COMMON_SHARD_LAYOUT_H_
#define WEFT_COMMON_SHARD_LAYOUT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace weft {

struct ShardLayout {
  int32_t world_size = 1;
  int32_t rank = 0;
  int32_t kv_begin = 0, kv_end = 0;
  int32_t head_begin = 0, head_end = 0;
  int64_t ff_begin = 0, ff_end = 0;
  int64_t vocab_begin = 0, vocab_end = 0;

  int32_t num_kv_heads() const { return kv_end - kv_begin; }
  int32_t num_heads() const { return head_end - head_begin; }
  int64_t num_ff() const { return ff_end - ff_begin; }
  int64_t num_vocab() const { return vocab_end - vocab_begin; }
  // Canonical text form sent in WorkerHello.shard_layout, e.g.
  // "tp=2;rank=0;kv=0-2;heads=0-6;ff=0-768;vocab=0-24576".
  std::string ToString() const;
};

// Fails (InvalidArgument) when the model cannot be split that way: world_size larger than
// the KV heads, or an FFN size that is not a multiple of 32.
absl::StatusOr<ShardLayout> ComputeShardLayout(int32_t n_head, int32_t n_head_kv, int64_t n_ff,
                                               int64_t n_vocab, int32_t world_size, int32_t rank);

}  // namespace weft

#endif  // WEFT_COMMON_SHARD_LAYOUT_H_

#include "common/shard_layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace weft {
namespace {

// [begin, end) of part `rank` when `n` units are split over `parts`, lower ranks first.
void Split(int64_t n, int32_t parts, int32_t rank, int64_t* begin, int64_t* end) {
  const int64_t base = n / parts;
  const int64_t extra = n % parts;
  *begin = rank * base + std::min<int64_t>(rank, extra);
  *end = *begin + base + (rank < extra ? 1 : 0);
}

}  // namespace

std::string ShardLayout::ToString() const {
  return absl::StrCat("tp=", world_size, ";rank=", rank, ";kv=", kv_begin, "-", kv_end,
                      ";heads=", head_begin, "-", head_end, ";ff=", ff_begin, "-", ff_end,
                      ";vocab=", vocab_begin, "-", vocab_end);
}

absl::StatusOr<ShardLayout> ComputeShardLayout(int32_t n_head, int32_t n_head_kv, int64_t n_ff,
                                               int64_t n_vocab, int32_t world_size, int32_t rank) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of world size ", world_size));
  }
  if (n_head_kv <= 0 || n_head % n_head_kv != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(n_head, " query heads do not group over ", n_head_kv, " KV heads"));
  }
  if (world_size > n_head_kv) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallel size ", world_size,
                                                   " is larger than the model's ", n_head_kv,
                                                   " KV heads"));
  }
  if (world_size > 1 && n_ff % 32 != 0) {
    return absl::InvalidArgumentError("the FFN size must be a multiple of 32 for TP");
  }
  ShardLayout s;
  s.world_size = world_size;
  s.rank = rank;
  int64_t b, e;
  Split(n_head_kv, world_size, rank, &b, &e);
  s.kv_begin = static_cast<int32_t>(b);
  s.kv_end = static_cast<int32_t>(e);
  const int32_t group = n_head / n_head_kv;
  s.head_begin = s.kv_begin * group;
  s.head_end = s.kv_end * group;
  if (world_size == 1) {
    s.ff_end = n_ff;
    s.vocab_end = n_vocab;
    return s;
  }
  Split(n_ff / 32, world_size, rank, &b, &e);
  s.ff_begin = b * 32;
  s.ff_end = e * 32;
  // Vocabulary rows are independent: split in units of 16 (one weight panel), the last
  // rank taking a partial unit when the size is not a multiple of 16.
  Split((n_vocab + 15) / 16, world_size, rank, &b, &e);
  s.vocab_begin = std::min(n_vocab, b * 16);
  s.vocab_end = std::min(n_vocab, e * 16);
  return s;
}

}  // namespace weft

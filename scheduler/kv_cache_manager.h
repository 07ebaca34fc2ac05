// KvCacheManager: sequence-level block management on one replica, over a BlockPool.
// It maps a sequence's tokens to blocks (token at position p lives in slot
// block_ids[p / block_size] * block_size + p % block_size), grows tables as tokens are
// scheduled, reuses cached prefixes (automatic prefix caching), forks tables for n > 1
// (children share full blocks; a partial last block is copied), and frees tables.
//
// Prefix caching: a full block's identity is the chained hash
//   h(i) = HashBlock(h(i-1), tokens[i*bs .. (i+1)*bs))      (h(-1) = kRootHash),
// computed by the sequence as its tokens become known (UpdateBlockHashes). A block is
// registered in the pool's index once all its tokens are known and its KV is computed
// (Commit); a new sequence reuses the longest registered prefix, always leaving at
// least one token to compute (so the worker has logits to sample from).
// Collisions: 64-bit hashes; a collision would reuse the wrong KV (probability ~n²/2⁶⁵
// for n distinct blocks ever cached).
//
// Ownership: owns the BlockPool. BlockTables are owned by their sequences and passed
// in. Thread-safety: thread-compatible (the planning thread owns it).
#ifndef WEFT_SCHEDULER_KV_CACHE_MANAGER_H_
#define WEFT_SCHEDULER_KV_CACHE_MANAGER_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/strong_id.h"
#include "scheduler/block_pool.h"
#include "scheduler/types.h"

namespace weft {

inline constexpr BlockHash kRootHash = 0x6a09e667f3bcc908ull;

// Hash of one full block given its parent's hash.
BlockHash HashBlock(BlockHash parent, absl::Span<const int32_t> block_tokens);

// Appends to `hashes` the hashes of every full block of `tokens` not hashed yet
// (hashes->size() blocks are assumed done). Amortized O(1) per token.
void UpdateBlockHashes(absl::Span<const int32_t> tokens, int32_t block_size,
                       std::vector<BlockHash>* hashes);

struct KvCacheManagerOptions {
  int32_t num_blocks = 0;
  int32_t block_size = 16;
  bool enable_prefix_caching = true;

  absl::Status Validate() const;
};

// A sequence's blocks on one replica.
struct BlockTable {
  std::vector<BlockId> block_ids;
  // Leading blocks already registered in (or taken from) the prefix index.
  int32_t num_hashed_blocks = 0;
};

// The longest reusable cached prefix for a sequence.
struct PrefixHit {
  int32_t num_blocks = 0;
  // How many of those are cached-free now (taking them consumes free blocks).
  int32_t num_cached_free = 0;
};

class KvCacheManager {
 public:
  static absl::StatusOr<KvCacheManager> Create(const KvCacheManagerOptions& options);

  KvCacheManager(KvCacheManager&&) = default;
  KvCacheManager& operator=(KvCacheManager&&) = default;

  int32_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  int32_t BlocksFor(int32_t num_tokens) const {
    return (num_tokens + block_size_ - 1) / block_size_;
  }
  const BlockPool& pool() const { return pool_; }
  int32_t num_free_blocks() const { return pool_.num_free(); }

  // Longest registered prefix of `hashes` for a sequence of `num_tokens` known tokens,
  // capped so that at least one token is left to compute. O(hit length).
  PrefixHit FindCachedPrefix(absl::Span<const BlockHash> hashes, int32_t num_tokens) const;

  // Free blocks that admitting with `hit` and holding `num_tokens_to_hold` tokens takes.
  int32_t BlocksNeededToAdmit(const PrefixHit& hit, int32_t num_tokens_to_hold) const;

  // Gives the empty `table` the hit blocks (shared) plus fresh blocks so that it covers
  // `num_tokens_to_hold` tokens. All or nothing: false when blocks are short.
  bool Admit(absl::Span<const BlockHash> hashes, const PrefixHit& hit,
             int32_t num_tokens_to_hold, BlockTable* table);

  // Appends fresh blocks so that `table` covers `num_tokens` tokens (no-op if it does).
  // All or nothing: false when blocks are short.
  bool Grow(int32_t num_tokens, BlockTable* table);

  // Registers the table's blocks [num_hashed_blocks, num_full_blocks) under `hashes`.
  // Call only for blocks whose tokens are all known and whose KV is computed (or
  // planned in a step that runs before any step that could reuse them).
  void Commit(absl::Span<const BlockHash> hashes, int32_t num_full_blocks, BlockTable* table);

  // Makes `child` (empty) share the blocks of `parent` that hold its first `num_tokens`
  // tokens. A partial last block is not shared but copied (*copy = {src, dst}), since
  // the child will append to it. All or nothing: false when no block is left for the
  // copy (child stays empty).
  bool Fork(const BlockTable& parent, int32_t num_tokens, BlockTable* child,
            std::optional<KvBlockCopy>* copy);

  // Releases every block of `table` (last block first, so a sequence's tail is evicted
  // before its prefix) and empties it.
  void Free(BlockTable* table);

 private:
  KvCacheManager(BlockPool pool, int32_t block_size, bool prefix_caching)
      : pool_(std::move(pool)), block_size_(block_size), prefix_caching_(prefix_caching) {}

  BlockPool pool_;
  int32_t block_size_;
  bool prefix_caching_;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_KV_CACHE_MANAGER_H_

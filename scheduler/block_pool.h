// BlockPool: the KV-cache block allocator of one replica. Blocks are fixed-size slots
// of the workers' KV memory, numbered 0 .. num_blocks-1; the pool only does the
// bookkeeping (the bytes live on the workers).
//
// Every block is in exactly one of three states:
//   * free        — never cached (or its hash was dropped); on a LIFO free list;
//   * referenced  — ref_count > 0: owned by that many sequences' block tables;
//   * cached-free — ref_count == 0 but it holds a full block of tokens whose hash is in
//                   the prefix-cache index; reusable by a later request with the same
//                   prefix, evicted in LRU order (least recently released first) when
//                   a fresh block is needed and no plain free block is left.
// Invariant (CheckInvariants): free + referenced + cached-free = total, the hash index
// and the per-block hashes agree, the LRU list holds exactly the cached-free blocks.
//
// All operations are O(1) (AllocateN: O(n)); running out of blocks is a value
// (std::optional / false), never an error. Programmer errors (releasing a free block)
// are CHECK failures.
//
// Ownership: the pool owns only its bookkeeping arrays. Thread-safety: thread-compatible
// (the planning thread owns it).
#ifndef WEFT_SCHEDULER_BLOCK_POOL_H_
#define WEFT_SCHEDULER_BLOCK_POOL_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/strong_id.h"

namespace weft {

// Identity of a full block's contents: chained hash of (parent block hash, token ids).
using BlockHash = uint64_t;

struct BlockPoolOptions {
  int32_t num_blocks = 0;

  absl::Status Validate() const;
};

class BlockPool {
 public:
  static absl::StatusOr<BlockPool> Create(const BlockPoolOptions& options);

  BlockPool(BlockPool&&) = default;
  BlockPool& operator=(BlockPool&&) = default;

  // Takes one block with ref_count 1: a plain free block if any, else the least recently
  // released cached-free block (its hash is dropped: evicted). nullopt when none is left.
  std::optional<BlockId> Allocate();
  // All-or-nothing: appends `n` blocks to `out` and returns true, or takes nothing.
  bool AllocateN(int32_t n, std::vector<BlockId>* out);

  // Adds an owner. The block must be referenced or cached-free; a cached-free block
  // leaves the LRU list (a prefix-cache hit).
  void AddRef(BlockId block);
  // Drops an owner. At zero the block becomes cached-free (most recently used end of
  // the LRU) if it has a hash, else plain free.
  void Release(BlockId block);

  // Prefix-cache index. Lookup does not change recency.
  std::optional<BlockId> Lookup(BlockHash hash) const;
  // Records that referenced `block` holds the full block of tokens identified by `hash`.
  // Returns false (and records nothing) when the block already has a hash or another
  // block is already indexed under `hash` (the same content computed twice).
  bool SetHash(BlockId block, BlockHash hash);

  // Copy-on-write: a block about to be written while shared (ref_count > 1) is replaced
  // by a fresh copy target. Returns `block` itself when the caller is its only owner;
  // otherwise allocates a new block, drops the caller's reference to `block` and returns
  // the new one (the caller lists the copy src -> dst). nullopt when no block is left.
  std::optional<BlockId> CopyOnWrite(BlockId block);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_count_.size()); }
  // Blocks an allocation can take now: plain free + cached-free.
  int32_t num_free() const { return num_plain_free() + num_cached_free_; }
  int32_t num_plain_free() const { return static_cast<int32_t>(free_list_.size()); }
  int32_t num_cached_free() const { return num_cached_free_; }
  int32_t num_referenced() const { return num_blocks() - num_free(); }
  int32_t ref_count(BlockId block) const { return ref_count_[Index(block)]; }
  bool has_hash(BlockId block) const { return has_hash_[Index(block)]; }
  bool is_cached_free(BlockId block) const {
    const int32_t i = Index(block);
    return ref_count_[i] == 0 && has_hash_[i];
  }
  // Cached-free blocks from least to most recently released (eviction order). O(n).
  std::vector<BlockId> CachedFreeInLruOrder() const;
  int64_t num_evictions() const { return num_evictions_; }

  // O(num_blocks) consistency check for tests.
  absl::Status CheckInvariants() const;

 private:
  explicit BlockPool(int32_t num_blocks);
  int32_t Index(BlockId block) const;
  void LruPushBack(int32_t i);
  void LruRemove(int32_t i);
  int32_t TakeBlock();

  static constexpr int32_t kNil = -1;

  std::vector<int32_t> ref_count_;
  std::vector<BlockHash> hash_;
  std::vector<uint8_t> has_hash_;
  // Intrusive doubly linked LRU list over cached-free blocks.
  std::vector<int32_t> lru_prev_;
  std::vector<int32_t> lru_next_;
  int32_t lru_head_ = kNil;  // least recently released: evicted first
  int32_t lru_tail_ = kNil;
  int32_t num_cached_free_ = 0;
  std::vector<int32_t> free_list_;  // LIFO stack of plain free blocks
  absl::flat_hash_map<BlockHash, int32_t> index_;
  int64_t num_evictions_ = 0;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_BLOCK_POOL_H_

#include "scheduler/block_pool.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace weft {

absl::Status BlockPoolOptions::Validate() const {
  if (num_blocks <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_blocks must be > 0, got ", num_blocks));
  }
  return absl::OkStatus();
}

absl::StatusOr<BlockPool> BlockPool::Create(const BlockPoolOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  return BlockPool(options.num_blocks);
}

BlockPool::BlockPool(int32_t num_blocks)
    : ref_count_(num_blocks, 0),
      hash_(num_blocks, 0),
      has_hash_(num_blocks, 0),
      lru_prev_(num_blocks, kNil),
      lru_next_(num_blocks, kNil) {
  free_list_.reserve(num_blocks);
  // Pushed in reverse so that blocks come out 0, 1, 2, ... (readable tests and plans).
  for (int32_t i = num_blocks - 1; i >= 0; --i) free_list_.push_back(i);
  index_.reserve(num_blocks);
}

int32_t BlockPool::Index(BlockId block) const {
  const int32_t i = block.value();
  CHECK(i >= 0 && i < num_blocks()) << "block " << i << " out of range " << num_blocks();
  return i;
}

void BlockPool::LruPushBack(int32_t i) {
  lru_prev_[i] = lru_tail_;
  lru_next_[i] = kNil;
  if (lru_tail_ != kNil) {
    lru_next_[lru_tail_] = i;
  } else {
    lru_head_ = i;
  }
  lru_tail_ = i;
  ++num_cached_free_;
}

void BlockPool::LruRemove(int32_t i) {
  const int32_t prev = lru_prev_[i];
  const int32_t next = lru_next_[i];
  if (prev != kNil) {
    lru_next_[prev] = next;
  } else {
    lru_head_ = next;
  }
  if (next != kNil) {
    lru_prev_[next] = prev;
  } else {
    lru_tail_ = prev;
  }
  lru_prev_[i] = kNil;
  lru_next_[i] = kNil;
  --num_cached_free_;
}

int32_t BlockPool::TakeBlock() {
  int32_t i;
  if (!free_list_.empty()) {
    i = free_list_.back();
    free_list_.pop_back();
  } else {
    i = lru_head_;
    DCHECK_NE(i, kNil);
    LruRemove(i);
    index_.erase(hash_[i]);
    has_hash_[i] = 0;
    ++num_evictions_;
  }
  DCHECK_EQ(ref_count_[i], 0);
  ref_count_[i] = 1;
  return i;
}

std::optional<BlockId> BlockPool::Allocate() {
  if (num_free() == 0) return std::nullopt;
  return BlockId(TakeBlock());
}

bool BlockPool::AllocateN(int32_t n, std::vector<BlockId>* out) {
  DCHECK_GE(n, 0);
  if (n > num_free()) return false;
  for (int32_t k = 0; k < n; ++k) out->push_back(BlockId(TakeBlock()));
  return true;
}

void BlockPool::AddRef(BlockId block) {
  const int32_t i = Index(block);
  if (ref_count_[i] == 0) {
    CHECK(has_hash_[i]) << "AddRef on plain free block " << i;
    LruRemove(i);
  }
  ++ref_count_[i];
}

void BlockPool::Release(BlockId block) {
  const int32_t i = Index(block);
  CHECK_GT(ref_count_[i], 0) << "Release of unreferenced block " << i;
  if (--ref_count_[i] > 0) return;
  if (has_hash_[i]) {
    LruPushBack(i);
  } else {
    free_list_.push_back(i);
  }
}

std::optional<BlockId> BlockPool::Lookup(BlockHash hash) const {
  auto it = index_.find(hash);
  if (it == index_.end()) return std::nullopt;
  return BlockId(it->second);
}

bool BlockPool::SetHash(BlockId block, BlockHash hash) {
  const int32_t i = Index(block);
  CHECK_GT(ref_count_[i], 0) << "SetHash on unreferenced block " << i;
  if (has_hash_[i]) return false;
  if (!index_.emplace(hash, i).second) return false;
  hash_[i] = hash;
  has_hash_[i] = 1;
  return true;
}

std::optional<BlockId> BlockPool::CopyOnWrite(BlockId block) {
  const int32_t i = Index(block);
  CHECK_GT(ref_count_[i], 0) << "CopyOnWrite of unreferenced block " << i;
  if (ref_count_[i] == 1) return block;
  if (num_free() == 0) return std::nullopt;
  const int32_t dst = TakeBlock();
  --ref_count_[i];  // still > 0: other owners keep it
  return BlockId(dst);
}

std::vector<BlockId> BlockPool::CachedFreeInLruOrder() const {
  std::vector<BlockId> out;
  for (int32_t i = lru_head_; i != kNil; i = lru_next_[i]) out.push_back(BlockId(i));
  return out;
}

absl::Status BlockPool::CheckInvariants() const {
  const int32_t n = num_blocks();
  std::vector<uint8_t> on_free_list(n, 0);
  for (int32_t i : free_list_) {
    if (i < 0 || i >= n) return absl::InternalError(absl::StrCat("free list holds ", i));
    if (on_free_list[i]) return absl::InternalError(absl::StrCat("block ", i, " freed twice"));
    on_free_list[i] = 1;
    if (ref_count_[i] != 0 || has_hash_[i]) {
      return absl::InternalError(absl::StrCat("free block ", i, " referenced or hashed"));
    }
  }
  std::vector<uint8_t> on_lru(n, 0);
  int32_t lru_count = 0;
  int32_t prev = kNil;
  for (int32_t i = lru_head_; i != kNil; i = lru_next_[i]) {
    if (on_lru[i] || ++lru_count > n) return absl::InternalError("LRU list has a cycle");
    on_lru[i] = 1;
    if (lru_prev_[i] != prev) return absl::InternalError("LRU back link broken");
    if (ref_count_[i] != 0 || !has_hash_[i] || on_free_list[i]) {
      return absl::InternalError(absl::StrCat("LRU block ", i, " not cached-free"));
    }
    prev = i;
  }
  if (prev != lru_tail_) return absl::InternalError("LRU tail wrong");
  if (lru_count != num_cached_free_) return absl::InternalError("cached-free count wrong");
  int32_t referenced = 0;
  int32_t hashed = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (ref_count_[i] < 0) return absl::InternalError("negative ref count");
    if (ref_count_[i] > 0) ++referenced;
    if (ref_count_[i] == 0 && !on_free_list[i] && !on_lru[i]) {
      return absl::InternalError(absl::StrCat("block ", i, " leaked (no owner, not free)"));
    }
    if (has_hash_[i]) {
      ++hashed;
      auto it = index_.find(hash_[i]);
      if (it == index_.end() || it->second != i) {
        return absl::InternalError(absl::StrCat("block ", i, " hash not indexed"));
      }
    }
  }
  if (hashed != static_cast<int32_t>(index_.size())) {
    return absl::InternalError("index holds hashes of no block");
  }
  if (num_plain_free() + referenced + num_cached_free_ != n) {
    return absl::InternalError(absl::StrCat("free ", num_plain_free(), " + referenced ", referenced,
                                            " + cached-free ", num_cached_free_, " != total ", n));
  }
  return absl::OkStatus();
}

}  // namespace weft

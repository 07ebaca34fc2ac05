#include "scheduler/kv_cache_manager.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace weft {
namespace {

// murmur3's 64-bit finalizer: a bijective avalanche mix.
inline uint64_t Fmix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

}  // namespace

BlockHash HashBlock(BlockHash parent, absl::Span<const int32_t> block_tokens) {
  uint64_t h = Fmix64(parent ^ 0x9e3779b97f4a7c15ull);
  for (int32_t t : block_tokens) {
    h = Fmix64(h + 0x9e3779b97f4a7c15ull + static_cast<uint32_t>(t));
  }
  return Fmix64(h ^ block_tokens.size());
}

void UpdateBlockHashes(absl::Span<const int32_t> tokens, int32_t block_size,
                       std::vector<BlockHash>* hashes) {
  const size_t num_full = tokens.size() / block_size;
  while (hashes->size() < num_full) {
    const size_t i = hashes->size();
    const BlockHash parent = i == 0 ? kRootHash : (*hashes)[i - 1];
    hashes->push_back(HashBlock(parent, tokens.subspan(i * block_size, block_size)));
  }
}

absl::Status KvCacheManagerOptions::Validate() const {
  if (block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("block_size must be > 0, got ", block_size));
  }
  BlockPoolOptions pool;
  pool.num_blocks = num_blocks;
  return pool.Validate();
}

absl::StatusOr<KvCacheManager> KvCacheManager::Create(const KvCacheManagerOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  BlockPoolOptions pool_options;
  pool_options.num_blocks = options.num_blocks;
  absl::StatusOr<BlockPool> pool = BlockPool::Create(pool_options);
  if (!pool.ok()) return pool.status();
  return KvCacheManager(std::move(*pool), options.block_size, options.enable_prefix_caching);
}

PrefixHit KvCacheManager::FindCachedPrefix(absl::Span<const BlockHash> hashes,
                                           int32_t num_tokens) const {
  PrefixHit hit;
  if (!prefix_caching_ || num_tokens <= 1) return hit;
  const int32_t max_blocks =
      std::min<int32_t>(static_cast<int32_t>(hashes.size()), (num_tokens - 1) / block_size_);
  for (int32_t i = 0; i < max_blocks; ++i) {
    std::optional<BlockId> b = pool_.Lookup(hashes[i]);
    if (!b) break;
    ++hit.num_blocks;
    if (pool_.ref_count(*b) == 0) ++hit.num_cached_free;
  }
  return hit;
}

int32_t KvCacheManager::BlocksNeededToAdmit(const PrefixHit& hit,
                                            int32_t num_tokens_to_hold) const {
  const int32_t fresh = std::max(0, BlocksFor(num_tokens_to_hold) - hit.num_blocks);
  return hit.num_cached_free + fresh;
}

bool KvCacheManager::Admit(absl::Span<const BlockHash> hashes, const PrefixHit& hit,
                           int32_t num_tokens_to_hold, BlockTable* table) {
  DCHECK(table->block_ids.empty());
  DCHECK_LE(hit.num_blocks, static_cast<int32_t>(hashes.size()));
  if (BlocksNeededToAdmit(hit, num_tokens_to_hold) > pool_.num_free()) return false;
  for (int32_t i = 0; i < hit.num_blocks; ++i) {
    std::optional<BlockId> b = pool_.Lookup(hashes[i]);
    CHECK(b.has_value()) << "prefix hit vanished between lookup and admission";
    pool_.AddRef(*b);
    table->block_ids.push_back(*b);
  }
  table->num_hashed_blocks = hit.num_blocks;
  const int32_t fresh = BlocksFor(num_tokens_to_hold) - hit.num_blocks;
  if (fresh > 0) CHECK(pool_.AllocateN(fresh, &table->block_ids));
  return true;
}

bool KvCacheManager::Grow(int32_t num_tokens, BlockTable* table) {
  const int32_t missing = BlocksFor(num_tokens) - static_cast<int32_t>(table->block_ids.size());
  if (missing <= 0) return true;
  return pool_.AllocateN(missing, &table->block_ids);
}

void KvCacheManager::Commit(absl::Span<const BlockHash> hashes, int32_t num_full_blocks,
                            BlockTable* table) {
  if (!prefix_caching_) return;
  DCHECK_LE(num_full_blocks, static_cast<int32_t>(hashes.size()));
  DCHECK_LE(num_full_blocks, static_cast<int32_t>(table->block_ids.size()));
  for (int32_t i = table->num_hashed_blocks; i < num_full_blocks; ++i) {
    // False when already registered (a shared block) or the same content sits in
    // another block: either way this block needs nothing more.
    pool_.SetHash(table->block_ids[i], hashes[i]);
  }
  table->num_hashed_blocks = std::max(table->num_hashed_blocks, num_full_blocks);
}

bool KvCacheManager::Fork(const BlockTable& parent, int32_t num_tokens, BlockTable* child,
                          std::optional<KvBlockCopy>* copy) {
  DCHECK(child->block_ids.empty());
  const int32_t num_blocks = BlocksFor(num_tokens);
  CHECK_LE(num_blocks, static_cast<int32_t>(parent.block_ids.size()));
  const bool partial = num_tokens % block_size_ != 0;
  copy->reset();
  if (partial && pool_.num_free() == 0) return false;
  for (int32_t i = 0; i < num_blocks; ++i) {
    pool_.AddRef(parent.block_ids[i]);
    child->block_ids.push_back(parent.block_ids[i]);
  }
  child->num_hashed_blocks = std::min(parent.num_hashed_blocks, num_tokens / block_size_);
  if (partial) {
    const BlockId src = child->block_ids.back();
    std::optional<BlockId> dst = pool_.CopyOnWrite(src);
    CHECK(dst.has_value() && *dst != src);
    child->block_ids.back() = *dst;
    *copy = KvBlockCopy{src, *dst};
  }
  return true;
}

void KvCacheManager::Free(BlockTable* table) {
  for (auto it = table->block_ids.rbegin(); it != table->block_ids.rend(); ++it) {
    pool_.Release(*it);
  }
  table->block_ids.clear();
  table->num_hashed_blocks = 0;
}

}  // namespace weft

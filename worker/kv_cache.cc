#include "worker/kv_cache.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace weft {
namespace {

bool ValidBlock(BlockId b, int32_t num_blocks) { return b.value() >= 0 && b.value() < num_blocks; }

}  // namespace

int64_t KvCache::BytesPerBlock(const KvPoolOptions& o) {
  return int64_t{o.num_layers} * 2 * o.num_kv_heads *
         kernels::KvTileBytes(o.dtype, o.head_dim, o.block_size);
}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const KvPoolOptions& options) {
  if (!kernels::KvDtypeSupported(options.dtype, options.head_dim)) {
    return absl::InvalidArgumentError(absl::StrCat("a ", KvDtypeName(options.dtype),
                                                   " KV cache needs head_dim % 4 == 0, not ",
                                                   options.head_dim));
  }
  if (absl::Status s = options.Validate(BytesPerBlock(options)); !s.ok()) return s;
  const size_t bytes = static_cast<size_t>(BytesPerBlock(options)) * options.num_blocks;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map a KV pool of ", bytes, " bytes: ", std::strerror(errno)));
  }
  return std::unique_ptr<KvCache>(new KvCache(options, static_cast<uint8_t*>(p), bytes));
}

KvCache::KvCache(const KvPoolOptions& options, uint8_t* pool, size_t mapped_bytes)
    : options_(options),
      bytes_per_block_(BytesPerBlock(options)),
      pool_(pool),
      mapped_bytes_(mapped_bytes) {}

int64_t KvCache::floats_per_block() const {
  CHECK(options_.dtype == KvDtype::kF32) << "floats_per_block() of a non-fp32 pool";
  return bytes_per_block_ / 4;
}

KvCache::~KvCache() { munmap(pool_, mapped_bytes_); }

kernels::PagedKvLayer KvCache::Layer(int32_t layer) {
  CHECK(layer >= 0 && layer < options_.num_layers) << "layer " << layer;
  const int64_t tile = kernels::KvTileBytes(options_.dtype, options_.head_dim, options_.block_size);
  const int64_t half = int64_t{options_.num_kv_heads} * tile;
  kernels::PagedKvLayer view;
  view.dtype = options_.dtype;
  view.k = pool_ + layer * 2 * half;
  view.v = view.k + half;
  view.block_stride = bytes_per_block_;
  view.head_stride = tile;
  view.block_size = options_.block_size;
  view.num_kv_heads = options_.num_kv_heads;
  view.head_dim = options_.head_dim;
  return view;
}

uint8_t* KvCache::BlockBytes(BlockId block) {
  CHECK(ValidBlock(block, options_.num_blocks)) << "block " << block;
  return pool_ + block.value() * bytes_per_block_;
}

float* KvCache::BlockData(BlockId block) {
  CHECK(options_.dtype == KvDtype::kF32) << "BlockData() of a non-fp32 pool";
  return reinterpret_cast<float*>(BlockBytes(block));
}

const float* KvCache::BlockData(BlockId block) const {
  return const_cast<KvCache*>(this)->BlockData(block);
}

absl::Status KvCache::CopyBlock(BlockId src, BlockId dst) {
  if (!ValidBlock(src, options_.num_blocks) || !ValidBlock(dst, options_.num_blocks)) {
    return absl::OutOfRangeError(absl::StrCat("CopyBlock(", src.value(), ", ", dst.value(),
                                              ") outside [0, ", options_.num_blocks, ")"));
  }
  if (src == dst) return absl::OkStatus();
  std::memcpy(BlockBytes(dst), BlockBytes(src), bytes_per_block_);
  return absl::OkStatus();
}

}  // namespace weft

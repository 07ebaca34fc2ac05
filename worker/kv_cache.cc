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

absl::Status KvPoolOptions::Validate() const {
  if (num_layers <= 0 || num_kv_heads <= 0 || head_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache shape must be positive: layers ", num_layers, ", kv heads ", num_kv_heads,
        ", head_dim ", head_dim));
  }
  if (block_size <= 0 || block_size > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("block_size ", block_size,
                                                   " is outside [1, 1024]"));
  }
  if (num_blocks <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_blocks ", num_blocks, " must be > 0"));
  }
  if (!kernels::KvDtypeSupported(dtype, head_dim)) {
    return absl::InvalidArgumentError(absl::StrCat("a ", kernels::KvDtypeName(dtype),
                                                   " KV cache needs head_dim % 4 == 0, not ",
                                                   head_dim));
  }
  const int64_t max_blocks = std::numeric_limits<int64_t>::max() / 4 / BytesPerBlock();
  if (num_blocks > max_blocks) return absl::InvalidArgumentError("KV pool size overflows");
  return absl::OkStatus();
}

int64_t KvPoolOptions::BytesPerBlock() const {
  return int64_t{num_layers} * 2 * num_kv_heads * kernels::KvTileBytes(dtype, head_dim, block_size);
}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const KvPoolOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  const size_t bytes = static_cast<size_t>(options.BytesPerBlock()) * options.num_blocks;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map a KV pool of ", bytes, " bytes: ", std::strerror(errno)));
  }
  return std::unique_ptr<KvCache>(new KvCache(options, static_cast<uint8_t*>(p), bytes));
}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::CreateWithBudget(KvPoolOptions options,
                                                                   int64_t budget_bytes) {
  options.num_blocks = 1;
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  const int64_t per_block = options.BytesPerBlock();
  if (budget_bytes < per_block) {
    return absl::InvalidArgumentError(absl::StrCat("KV budget of ", budget_bytes,
                                                   " bytes is less than one block (",
                                                   per_block, " bytes)"));
  }
  const int64_t blocks = budget_bytes / per_block;
  if (blocks > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError("KV budget gives more than 2^31 blocks");
  }
  options.num_blocks = static_cast<int32_t>(blocks);
  return Create(options);
}

KvCache::KvCache(const KvPoolOptions& options, uint8_t* pool, size_t mapped_bytes)
    : options_(options),
      bytes_per_block_(options.BytesPerBlock()),
      pool_(pool),
      mapped_bytes_(mapped_bytes) {}

absl::StatusOr<KvDtype> ParseKvDtype(absl::string_view name) {
  for (KvDtype d : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBf16, KvDtype::kInt8}) {
    if (name == kernels::KvDtypeName(d)) return d;
  }
  if (name == "fp16") return KvDtype::kF16;  // as the CUDA backend always took it
  return absl::InvalidArgumentError(
      absl::StrCat("unknown KV cache type '", name, "' (f32, f16, bf16, int8)"));
}

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

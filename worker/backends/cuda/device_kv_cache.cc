#include "worker/backends/cuda/device_kv_cache.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace weft::cuda_backend {

namespace kc = ::weft::kernels::cuda;

absl::Status DeviceKvOptions::Validate() const {
  if (num_layers <= 0 || num_kv_heads <= 0 || head_dim <= 0 || head_dim % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache shape must be positive with head_dim % 8 == 0: layers ", num_layers,
        ", kv heads ", num_kv_heads, ", head_dim ", head_dim));
  }
  if (block_size <= 0 || block_size > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("block_size ", block_size,
                                                   " is outside [1, 1024]"));
  }
  if (num_blocks <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_blocks ", num_blocks, " must be > 0"));
  }
  if (num_blocks > std::numeric_limits<int64_t>::max() / 2 / BytesPerBlock()) {
    return absl::InvalidArgumentError("KV pool size overflows");
  }
  return absl::OkStatus();
}

int64_t DeviceKvOptions::LayerBytes() const {
  const int64_t elems = int64_t{num_kv_heads} * block_size * head_dim;  // per K or V
  int64_t bytes = 2 * elems * kc::KvElementBytes(dtype);
  if (dtype == kc::KvDtype::kInt8) bytes += 2 * (elems / kc::kKvInt8Group) * 2;
  return (bytes + 15) / 16 * 16;
}

absl::StatusOr<std::unique_ptr<DeviceKvCache>> DeviceKvCache::Create(
    const DeviceKvOptions& options) {
  WEFT_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<DeviceKvCache> c(new DeviceKvCache(options));
  const size_t bytes = static_cast<size_t>(options.BytesPerBlock()) * options.num_blocks;
  absl::Status s = c->pool_.Allocate(bytes);
  if (!s.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate a KV pool of ", bytes, " bytes on the GPU: ", s.message()));
  }
  WEFT_CUDA_RETURN_IF_ERROR(cudaMemset(c->pool_.get(), 0, bytes));
  return c;
}

absl::StatusOr<std::unique_ptr<DeviceKvCache>> DeviceKvCache::CreateWithBudget(
    DeviceKvOptions options, int64_t budget_bytes) {
  options.num_blocks = 1;
  WEFT_RETURN_IF_ERROR(options.Validate());
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

kc::PagedKvView DeviceKvCache::Layer(int32_t layer) const {
  const DeviceKvOptions& o = options_;
  const int64_t elems = int64_t{o.num_kv_heads} * o.block_size * o.head_dim;
  const int32_t es = kc::KvElementBytes(o.dtype);
  uint8_t* base = pool_.as<uint8_t>() + layer * o.LayerBytes();
  kc::PagedKvView v;
  v.k = base;
  v.v = base + elems * es;
  if (o.dtype == kc::KvDtype::kInt8) {
    v.k_scale = reinterpret_cast<uint16_t*>(base + 2 * elems * es);
    v.v_scale = v.k_scale + elems / kc::kKvInt8Group;
  }
  v.block_stride = o.BytesPerBlock() / es;
  v.scale_block_stride = o.BytesPerBlock() / 2;
  v.block_size = o.block_size;
  v.num_kv_heads = o.num_kv_heads;
  v.head_dim = o.head_dim;
  v.dtype = o.dtype;
  return v;
}

absl::Status DeviceKvCache::CopyBlock(int32_t src, int32_t dst, cudaStream_t stream) {
  if (src < 0 || src >= num_blocks() || dst < 0 || dst >= num_blocks()) {
    return absl::OutOfRangeError(absl::StrCat("CopyBlock(", src, ", ", dst, ") outside [0, ",
                                              num_blocks(), ")"));
  }
  if (src == dst) return absl::OkStatus();
  const int64_t bytes = bytes_per_block();
  WEFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(pool_.as<uint8_t>() + dst * bytes,
                                            pool_.as<uint8_t>() + src * bytes,
                                            static_cast<size_t>(bytes),
                                            cudaMemcpyDeviceToDevice, stream));
  return absl::OkStatus();
}

}  // namespace weft::cuda_backend

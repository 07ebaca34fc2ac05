#include "worker/backends/cuda/device_kv_cache.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace weft::cuda_backend {

namespace kc = ::weft::kernels::cuda;

int64_t DeviceKvCache::LayerBytes(const KvPoolOptions& o) {
  const int64_t elems = int64_t{o.num_kv_heads} * o.block_size * o.head_dim;  // per K or V
  int64_t bytes = 2 * elems * kc::KvElementBytes(o.dtype);
  if (o.dtype == KvDtype::kInt8) bytes += 2 * (elems / kc::kKvInt8Group) * 2;
  return (bytes + 15) / 16 * 16;
}

absl::StatusOr<std::unique_ptr<DeviceKvCache>> DeviceKvCache::Create(
    const KvPoolOptions& options) {
  if (options.dtype == KvDtype::kF32 || options.head_dim % kc::kKvInt8Group != 0) {
    return absl::InvalidArgumentError(absl::StrCat("a GPU KV cache takes f16, bf16 or int8 with "
                                                   "head_dim % 8 == 0, not ",
                                                   KvDtypeName(options.dtype), " and ",
                                                   options.head_dim));
  }
  WEFT_RETURN_IF_ERROR(options.Validate(BytesPerBlock(options)));
  std::unique_ptr<DeviceKvCache> c(new DeviceKvCache(options));
  const size_t bytes = static_cast<size_t>(BytesPerBlock(options)) * options.num_blocks;
  absl::Status s = c->pool_.Allocate(bytes);
  if (!s.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate a KV pool of ", bytes, " bytes on the GPU: ", s.message()));
  }
  WEFT_CUDA_RETURN_IF_ERROR(cudaMemset(c->pool_.get(), 0, bytes));
  return c;
}

kc::PagedKvView DeviceKvCache::Layer(int32_t layer) const {
  const KvPoolOptions& o = options_;
  const int64_t elems = int64_t{o.num_kv_heads} * o.block_size * o.head_dim;
  const int32_t es = kc::KvElementBytes(o.dtype);
  uint8_t* base = pool_.as<uint8_t>() + layer * LayerBytes(o);
  kc::PagedKvView v;
  v.k = base;
  v.v = base + elems * es;
  if (o.dtype == KvDtype::kInt8) {
    v.k_scale = reinterpret_cast<uint16_t*>(base + 2 * elems * es);
    v.v_scale = v.k_scale + elems / kc::kKvInt8Group;
  }
  v.block_stride = BytesPerBlock(o) / es;
  v.scale_block_stride = BytesPerBlock(o) / 2;
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

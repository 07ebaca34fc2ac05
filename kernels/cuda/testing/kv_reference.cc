#include "kernels/cuda/testing/kv_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/ggml_types.h"

namespace weft::kernels::cuda::testing {

void QuantizeInt8Group(const float* x, int8_t* q, uint16_t* scale_bits) {
  float amax = 0.0f;
  for (int i = 0; i < kKvInt8Group; ++i) amax = std::max(amax, std::fabs(x[i]));
  *scale_bits = Fp32ToFp16(amax / 127.0f);
  const float scale = Fp16ToFp32(*scale_bits);
  for (int i = 0; i < kKvInt8Group; ++i) {
    const float r = scale == 0.0f ? 0.0f : std::round(x[i] / scale);
    q[i] = static_cast<int8_t>(std::min(std::max(r, -127.0f), 127.0f));
  }
}

float RoundTrip(KvDtype dtype, float x) {
  switch (dtype) {
    case KvDtype::kF16:
      return Fp16ToFp32(Fp32ToFp16(x));
    case KvDtype::kBf16:
      return Bf16ToFp32(Fp32ToBf16(x));
    case KvDtype::kInt8:
    case KvDtype::kF32:  // not a device type
      break;
  }
  return x;
}

HostPagedKv::HostPagedKv(KvDtype dtype, int32_t num_blocks, int32_t block_size,
                         int32_t num_kv_heads, int32_t head_dim)
    : dtype_(dtype),
      num_blocks_(num_blocks),
      block_size_(block_size),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      half_(int64_t{num_kv_heads} * block_size * head_dim),
      data_(static_cast<size_t>(num_blocks) * 2 * half_ * KvElementBytes(dtype), 0),
      scales_(dtype == KvDtype::kInt8 ? static_cast<size_t>(num_blocks) * 2 * half_ / kKvInt8Group
                                      : 0,
              0) {}

int64_t HostPagedKv::Elem(int32_t block, bool v, int32_t head, int32_t slot, int32_t d) const {
  return int64_t{block} * 2 * half_ + (v ? half_ : 0) +
         (int64_t{head} * block_size_ + slot) * head_dim_ + d;
}

float HostPagedKv::Get(int64_t elem, int64_t scale_index) const {
  switch (dtype_) {
    case KvDtype::kF16: {
      uint16_t h;
      std::memcpy(&h, data_.data() + 2 * elem, 2);
      return Fp16ToFp32(h);
    }
    case KvDtype::kBf16: {
      uint16_t h;
      std::memcpy(&h, data_.data() + 2 * elem, 2);
      return Bf16ToFp32(h);
    }
    case KvDtype::kInt8:
      return static_cast<float>(static_cast<int8_t>(data_[elem])) *
             Fp16ToFp32(scales_[scale_index]);
    case KvDtype::kF32:  // not a device type
      break;
  }
  return 0.0f;
}

void HostPagedKv::Put(int64_t elem, int64_t scale_index, const float* x8) {
  for (int i = 0; i < kKvInt8Group; ++i) {
    uint16_t h;
    switch (dtype_) {
      case KvDtype::kF16:
        h = Fp32ToFp16(x8[i]);
        std::memcpy(data_.data() + 2 * (elem + i), &h, 2);
        break;
      case KvDtype::kBf16:
        h = Fp32ToBf16(x8[i]);
        std::memcpy(data_.data() + 2 * (elem + i), &h, 2);
        break;
      case KvDtype::kInt8:
      case KvDtype::kF32:  // not a device type
        break;
    }
  }
  if (dtype_ == KvDtype::kInt8) {
    QuantizeInt8Group(x8, reinterpret_cast<int8_t*>(data_.data() + elem), &scales_[scale_index]);
  }
}

void HostPagedKv::Write(const float* k_row, const float* v_row, int64_t slot_id) {
  if (slot_id < 0) return;
  const int32_t block = static_cast<int32_t>(slot_id / block_size_);
  const int32_t slot = static_cast<int32_t>(slot_id % block_size_);
  for (int32_t h = 0; h < num_kv_heads_; ++h) {
    for (int32_t d = 0; d < head_dim_; d += kKvInt8Group) {
      const float* src_k = k_row + h * head_dim_ + d;
      const float* src_v = v_row + h * head_dim_ + d;
      const int64_t ek = Elem(block, false, h, slot, d);
      const int64_t ev = Elem(block, true, h, slot, d);
      Put(ek, ek / kKvInt8Group, src_k);
      Put(ev, ev / kKvInt8Group, src_v);
    }
  }
}

float HostPagedKv::K(int32_t block, int32_t head, int32_t slot, int32_t d) const {
  const int64_t e = Elem(block, false, head, slot, d);
  return Get(e, e / kKvInt8Group);
}

float HostPagedKv::V(int32_t block, int32_t head, int32_t slot, int32_t d) const {
  const int64_t e = Elem(block, true, head, slot, d);
  return Get(e, e / kKvInt8Group);
}

PagedKvView HostPagedKv::View(void* device_data, uint16_t* device_scales) const {
  PagedKvView v;
  const int32_t es = KvElementBytes(dtype_);
  v.k = device_data;
  v.v = static_cast<uint8_t*>(device_data) + half_ * es;
  if (dtype_ == KvDtype::kInt8) {
    v.k_scale = device_scales;
    v.v_scale = device_scales + half_ / kKvInt8Group;
  }
  v.block_stride = 2 * half_;
  v.scale_block_stride = 2 * half_ / kKvInt8Group;
  v.block_size = block_size_;
  v.num_kv_heads = num_kv_heads_;
  v.head_dim = head_dim_;
  v.dtype = dtype_;
  return v;
}

void HostPagedKv::CpuPool(std::vector<float>* pool, PagedKvLayer* layer) const {
  pool->assign(static_cast<size_t>(num_blocks_) * 2 * half_, 0.0f);
  // An fp32 pool (byte strides, kernels/cpu/paged_attention.h) holding the dequantized
  // values, so the CPU kernels attend to exactly what the GPU pool stores.
  layer->dtype = weft::kernels::KvDtype::kF32;
  layer->k = reinterpret_cast<uint8_t*>(pool->data());
  layer->v = reinterpret_cast<uint8_t*>(pool->data() + half_);
  layer->block_stride = 2 * half_ * int64_t{sizeof(float)};
  layer->head_stride = int64_t{head_dim_} * block_size_ * int64_t{sizeof(float)};
  layer->block_size = block_size_;
  layer->num_kv_heads = num_kv_heads_;
  layer->head_dim = head_dim_;
  for (int32_t b = 0; b < num_blocks_; ++b) {
    for (int32_t h = 0; h < num_kv_heads_; ++h) {
      float* kt = reinterpret_cast<float*>(layer->KTile(b, h));
      float* vt = reinterpret_cast<float*>(layer->VTile(b, h));
      for (int32_t s = 0; s < block_size_; ++s) {
        for (int32_t d = 0; d < head_dim_; ++d) {
          kt[d * block_size_ + s] = K(b, h, s, d);  // K transposed
          vt[s * head_dim_ + d] = V(b, h, s, d);
        }
      }
    }
  }
}

}  // namespace weft::kernels::cuda::testing

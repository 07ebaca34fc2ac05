// Host twin of the GPU paged KV cache of one layer (kernels/cuda/paged_kv.h): the same
// bytes, written by plain C++, plus the CPU attention kernels' fp32 view of the same
// (dequantized) values, so that kernels/cpu/paged_attention.h is the reference for the
// CUDA attention kernels.
//
// Test pool layout (one layer per block): block b's data is [K: H*B*D][V: H*B*D]
// elements; its int8 scales [K: H*B*D/8][V: H*B*D/8].
// Thread-safety: a value type; one thread.
#ifndef WEFT_KERNELS_CUDA_TESTING_KV_REFERENCE_H_
#define WEFT_KERNELS_CUDA_TESTING_KV_REFERENCE_H_

#include <cstdint>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "kernels/cuda/dtypes.h"
#include "kernels/cuda/paged_kv.h"

namespace weft::kernels::cuda::testing {

// DESIGN.md's int8 group: scale = fp16(max|x| / 127), q = clamp(round(x / scale)).
void QuantizeInt8Group(const float* x, int8_t* q, uint16_t* scale_bits);

// x rounded through fp16 or bf16 (round to nearest even).
float RoundTrip(KvDtype dtype, float x);

class HostPagedKv {
 public:
  HostPagedKv(KvDtype dtype, int32_t num_blocks, int32_t block_size, int32_t num_kv_heads,
              int32_t head_dim);

  KvDtype dtype() const { return dtype_; }
  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  int32_t num_kv_heads() const { return num_kv_heads_; }
  int32_t head_dim() const { return head_dim_; }
  int64_t block_elems() const { return 2 * half_; }  // data elements per block
  int64_t block_scales() const { return 2 * half_ / kKvInt8Group; }

  // Raw pools, as the GPU holds them.
  std::vector<uint8_t>& data() { return data_; }
  std::vector<uint16_t>& scales() { return scales_; }
  const std::vector<uint8_t>& data() const { return data_; }
  const std::vector<uint16_t>& scales() const { return scales_; }

  // Stores one token's K and V (num_kv_heads*head_dim fp32 each) into slot
  // block*block_size + slot, as WritePagedKv does.
  void Write(const float* k_row, const float* v_row, int64_t slot_id);

  // Dequantized element of K or V.
  float K(int32_t block, int32_t head, int32_t slot, int32_t d) const;
  float V(int32_t block, int32_t head, int32_t slot, int32_t d) const;

  // The GPU view of this layout over device copies of data() and scales().
  PagedKvView View(void* device_data, uint16_t* device_scales) const;

  // The CPU kernels' fp32 pool (kernels/cpu/paged_attention.h layout) holding K() and V()
  // of every block; `layer` is set to its view (valid while `pool` lives).
  void CpuPool(std::vector<float>* pool, PagedKvLayer* layer) const;

 private:
  float Get(int64_t elem, int64_t scale_index) const;
  void Put(int64_t elem, int64_t scale_index, const float* x8);
  int64_t Elem(int32_t block, bool v, int32_t head, int32_t slot, int32_t d) const;

  KvDtype dtype_;
  int32_t num_blocks_, block_size_, num_kv_heads_, head_dim_;
  int64_t half_;  // elements of K (or V) per block
  std::vector<uint8_t> data_;
  std::vector<uint16_t> scales_;
};

}  // namespace weft::kernels::cuda::testing

#endif  // WEFT_KERNELS_CUDA_TESTING_KV_REFERENCE_H_

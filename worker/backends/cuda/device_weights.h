// DeviceWeights: a Llama model's weights for one tensor-parallel rank, on the GPU.
//
// Built from the host LlamaWeights (worker/model/llama_weights.h, which already did the
// tensor-parallel slicing as views of the mmap'd GGUF): every matrix is uploaded in its
// GGUF encoding and dequantized on the device to bf16 ([n][k] row-major, the layout the
// cuBLAS GEMM takes). Q, K and V are fused into one [q_width + 2*kv_width][hidden]
// matrix and gate/up into one [2*ffn][hidden] (one GEMM each). For quantized matrices
// (Q4_0/Q4_1/Q8_0 repacked; Q5_0/Q5_1/Q4_K/Q5_K/Q6_K as their GGUF rows) a quantized
// copy is kept as well when `gemv_copies` is set: the fused dequantizing GEMV reads it
// for batches of <= 4 rows, streaming 4.5-8.5 bits per weight instead of 16. A fused
// matrix whose parts differ in type (Q4_K_M files: a Q6_K V beside Q4_K Q and K) keeps
// one quantized copy per part (one GEMV launch each, into its rows of the output). Norm weights are fp32; the token
// embedding is bf16 [vocab][hidden]; a tied LM head shares it.
//
// Ownership: owns every device allocation. Thread-safety: immutable after Upload.
#ifndef WEFT_WORKER_BACKENDS_CUDA_DEVICE_WEIGHTS_H_
#define WEFT_WORKER_BACKENDS_CUDA_DEVICE_WEIGHTS_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf.h"
#include "common/quant_matrix.h"
#include "kernels/cuda/quant_types.h"
#include "worker/backends/cuda/device_buffer.h"
#include "worker/model/llama_weights.h"

namespace weft::cuda_backend {

// Rows [row0, row0 + weights.n) of a DeviceLinear as a quantized GEMV copy.
struct GemvPart {
  int64_t row0 = 0;
  kernels::cuda::GemvWeights weights;
};

struct DeviceLinear {
  int64_t n = 0;  // output features (rows)
  int64_t k = 0;  // input features
  const void* dense = nullptr;  // [n][k] bf16; owned by dense_owner or shared
  DeviceBuffer dense_owner;
  // Every row has a quantized GEMV copy: one part when all rows share a type (gemv then
  // covers them all), else one part per fused matrix.
  bool has_gemv = false;
  kernels::cuda::GemvWeights gemv;  // valid when has_gemv and gemv_parts.size() == 1
  std::vector<GemvPart> gemv_parts;
  DeviceBuffer gemv_qs, gemv_d, gemv_m;  // the parts' arrays, one after another
};

struct DeviceLayer {
  DeviceBuffer attn_norm;  // fp32 [hidden]
  DeviceBuffer ffn_norm;   // fp32 [hidden]
  DeviceLinear qkv;        // [q_width + 2*kv_width][hidden]
  DeviceLinear o;          // [hidden][q_width]
  DeviceLinear gate_up;    // [2*ffn][hidden]
  DeviceLinear down;       // [hidden][ffn]
};

struct DeviceWeightsOptions {
  bool gemv_copies = true;
};

class DeviceWeights {
 public:
  // Unimplemented for a matrix type the device cannot dequantize or a row length that is
  // not a multiple of 32; InternalError for a CUDA failure (e.g. out of memory).
  static absl::StatusOr<std::unique_ptr<DeviceWeights>> Upload(
      const GgufFile& file, const LlamaWeights& host, const DeviceWeightsOptions& options,
      cudaStream_t stream);

  const std::vector<DeviceLayer>& layers() const { return layers_; }
  const void* embedding() const { return embedding_.get(); }  // bf16 [vocab][hidden]
  const float* output_norm() const { return output_norm_.as<float>(); }
  const DeviceLinear& lm_head() const { return lm_head_; }
  int64_t device_bytes() const { return device_bytes_; }
  // Matrix types seen, e.g. "q4_1,q8_0" (for the hello's kernels string).
  const std::string& types() const { return types_; }

 private:
  DeviceWeights() = default;
  absl::Status UploadLinear(const std::vector<const QuantMatrix*>& parts,
                            const DeviceWeightsOptions& options, cudaStream_t stream,
                            DeviceLinear* out);
  absl::Status DequantInto(const QuantMatrix& m, void* dst, cudaStream_t stream);
  absl::Status UploadGemv(const std::vector<const QuantMatrix*>& parts,
                          DeviceLinear* out);
  absl::Status UploadFloats(const std::vector<float>& v, DeviceBuffer* out);
  void NoteType(GgmlType t);

  std::vector<DeviceLayer> layers_;
  DeviceBuffer embedding_;
  DeviceBuffer output_norm_;
  DeviceLinear lm_head_;
  DeviceBuffer staging_;  // raw GGUF bytes of the matrix being dequantized
  int64_t device_bytes_ = 0;
  std::string types_;
};

}  // namespace weft::cuda_backend

#endif  // WEFT_WORKER_BACKENDS_CUDA_DEVICE_WEIGHTS_H_

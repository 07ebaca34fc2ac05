// CpuBackend: the Backend of a worker rank on the CPU — a LlamaModel (this rank's shard,
// kernels picked at run time) and a KvCache sized for it.
// Ownership: owns the model and the cache; borrows the GgufFile.
// Thread-safety: as Backend (one step thread).
#ifndef WEFT_WORKER_BACKENDS_CPU_BACKEND_H_
#define WEFT_WORKER_BACKENDS_CPU_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/gguf.h"
#include "worker/backends/backend.h"
#include "worker/kv_cache.h"
#include "worker/model/llama_model.h"

namespace weft {

struct CpuBackendOptions {
  LlamaModelOptions model;
  int32_t block_size = 16;
  // KV pool size: num_kv_blocks if > 0, else as many blocks as kv_memory_bytes holds.
  int32_t num_kv_blocks = 0;
  int64_t kv_memory_bytes = int64_t{1} << 30;

  absl::Status Validate() const;
};

class CpuBackend : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(const GgufFile& file,
                                                            const CpuBackendOptions& options);

  const char* name() const override { return "cpu"; }
  std::string kernels() const override;
  const LlamaConfig& config() const override { return model_->config(); }
  int32_t block_size() const override { return kv_->block_size(); }
  int32_t num_kv_blocks() const override { return kv_->num_blocks(); }
  int64_t kv_pool_bytes() const override { return kv_->pool_bytes(); }

  absl::Status Forward(const ForwardBatch& batch, ForwardOutput* out) override {
    return model_->Forward(batch, kv_.get(), out);
  }
  absl::Status CopyBlock(int32_t src, int32_t dst) override {
    return kv_->CopyBlock(BlockId(src), BlockId(dst));
  }

  LlamaModel& model() { return *model_; }
  KvCache& kv_cache() { return *kv_; }

 private:
  CpuBackend() = default;

  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<KvCache> kv_;
};

}  // namespace weft

#endif  // WEFT_WORKER_BACKENDS_CPU_BACKEND_H_

// CpuBackend: the Backend of a worker rank on the CPU — a LlamaModel (this rank's shard,
// kernels picked at run time) and a KvCache sized for it. Under tensor parallelism the
// ranks of a replica (processes on one host) form their group over a POSIX shared-memory
// segment named "<replica>-e<epoch>" (ShmCommunicator) when the scheduler admits them.
// Rank 0 creates the segment and unlinks it when it leaves; when rank 0 died instead
// (SIGKILL, OOM), the rank that leaves removes the orphaned segment (its creator is
// gone), so a lost rank never leaks 2 x world_size x 4 MiB of /dev/shm.
// Ownership: owns the model, the cache and the communicator; borrows the GgufFile.
// Thread-safety: as Backend (one step thread).
#ifndef WEFT_WORKER_BACKENDS_CPU_BACKEND_H_
#define WEFT_WORKER_BACKENDS_CPU_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/gguf.h"
#include "worker/backends/backend.h"
#include "worker/backends/forward_stepper.h"
#include "worker/comm/communicator.h"
#include "worker/kv_cache.h"
#include "worker/model/llama_model.h"

namespace weft {

struct CpuBackendOptions {
  // The model's options; model.all_reducer is set by CpuBackend itself when
  // world_size > 1.
  LlamaModelOptions model;
  // Tensor parallelism: this process is rank `rank` of `world_size`.
  int32_t rank = 0;
  int32_t world_size = 1;
  // Deadline of each collective: a dead or stopped peer fails the step within it.
  absl::Duration collective_timeout = absl::Seconds(10);
  // How long JoinGroup waits for the other ranks.
  absl::Duration group_attach_timeout = absl::Seconds(30);
  int32_t block_size = 16;
  // KV pool size: num_kv_blocks if > 0, else as many blocks as kv_memory_bytes holds.
  int32_t num_kv_blocks = 0;
  int64_t kv_memory_bytes = kDefaultHostKvMemoryBytes;

  absl::Status Validate() const;
};

class CpuBackend : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(const GgufFile& file,
                                                            const CpuBackendOptions& options);
  ~CpuBackend() override;

  const char* name() const override { return "cpu"; }
  std::string kernels() const override;
  const ModelConfig& config() const override { return model_->config(); }
  int32_t block_size() const override { return kv_->block_size(); }
  int32_t num_kv_blocks() const override { return kv_->num_blocks(); }
  int64_t kv_pool_bytes() const override { return kv_->pool_bytes(); }

  // The forward pass (which checks its batch again: LlamaModel::Forward's contract for
  // its other callers), block copies, host sampling (ForwardStepper).
  absl::Status Step(const StepBatch& batch, StepOutput* out) override {
    return stepper_->Step(*this, batch, out);
  }
  absl::Status Forward(const ForwardBatch& batch, ForwardOutput* out) override {
    return model_->Forward(batch, kv_.get(), out);
  }
  absl::Status CopyBlock(int32_t src, int32_t dst) override {
    return kv_->CopyBlock(BlockId(src), BlockId(dst));
  }
  absl::Status JoinGroup(absl::string_view replica, int64_t epoch,
                         absl::string_view comm_init) override;
  void LeaveGroup() override;
  double collective_seconds() const override;

  LlamaModel& model() { return *model_; }
  KvCache& kv_cache() { return *kv_; }

 private:
  class GroupReducer;

  explicit CpuBackend(const CpuBackendOptions& options);

  const CpuBackendOptions options_;
  std::unique_ptr<GroupReducer> reducer_;  // world_size > 1 only
  std::string group_name_;  // the segment of the current (or last) group; "" if none
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<ForwardStepper> stepper_;
};

// "<replica>-e<epoch>" with characters outside [A-Za-z0-9._-] replaced by '_': the name
// of a replica's shared-memory segment.
std::string GroupSegmentName(absl::string_view replica, int64_t epoch);

}  // namespace weft

#endif  // WEFT_WORKER_BACKENDS_CPU_BACKEND_H_

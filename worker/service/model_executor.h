// ModelExecutor: a worker rank's StepExecutor over any Backend (CPU, CUDA or null) —
// applies each plan to the StateCache (the step's one validation), makes one
// Backend::Step call over the StepBatch (forward pass, copy-on-write block copies, a
// token and the logprobs asked for per do_sample sequence), appends the tokens and
// answers.
//
// Failure: a plan that cannot be applied or a forward pass that fails is reported in
// StepResult.error; the plan still counts as consumed and its sequences' state is
// dropped (StateCache::Fail), so the next plan applies cleanly and the scheduler ends
// exactly that step's requests.
// Ownership: borrows the GgufFile (must outlive it); owns the backend.
// Thread-safety: everything runs on the rank's step thread (WorkerClient::Run).
#ifndef WEFT_WORKER_SERVICE_MODEL_EXECUTOR_H_
#define WEFT_WORKER_SERVICE_MODEL_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf.h"
#include "worker/backends/backend.h"
#include "common/plan/state_cache.h"
#include "common/sampling/sampler.h"
#include "worker/service/worker_client.h"

namespace weft {

struct ModelExecutorOptions {
  std::string replica = "replica-0";
  int32_t rank = 0;
  int32_t world_size = 1;

  absl::Status Validate() const;
};

class ModelExecutor : public StepExecutor {
 public:
  static absl::StatusOr<std::unique_ptr<ModelExecutor>> Create(
      const GgufFile& file, std::unique_ptr<Backend> backend, const ModelExecutorOptions& options);

  weft::v1::WorkerHello Hello() override;
  absl::Status OnWelcome(const weft::v1::Welcome& welcome) override;
  weft::v1::StepResult Execute(const weft::v1::StepPlan& plan) override;
  void ExecuteInto(const weft::v1::StepPlan& plan, weft::v1::StepResult* result) override;
  void OnDetach() override;

  int32_t num_kv_blocks() const { return backend_->num_kv_blocks(); }
  Backend& backend() { return *backend_; }

 private:
  ModelExecutor(const GgufFile& file, std::unique_ptr<Backend> backend,
                const ModelExecutorOptions& options);
  absl::Status Run(const weft::v1::StepPlan& plan, weft::v1::StepResult* result);

  const GgufFile& file_;
  const ModelExecutorOptions options_;
  const std::string worker_id_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<StateCache> cache_;
  // Reused every step.
  StepBatch batch_;
  StepOutput step_;
};

}  // namespace weft

#endif  // WEFT_WORKER_SERVICE_MODEL_EXECUTOR_H_

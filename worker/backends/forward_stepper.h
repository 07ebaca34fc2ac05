// ForwardStepper: Backend::Step for a backend whose forward pass returns host logits
// (ForwardOutput): builds the ForwardBatch from the StepBatch's chunks, runs
// Backend::Forward and the block copies, and samples — the entries that want no logprobs
// on the backend's device in one call (Backend::SampleOnDevice) when it offers it, the
// rest (and all of them when it does not) with the host Sampler. One logprobs request
// no longer sends the whole batch to the host.
// Ownership: owns its scratch (reused every step); borrows the backend per call.
// Thread-safety: as Backend (one step thread).
#ifndef WEFT_WORKER_BACKENDS_FORWARD_STEPPER_H_
#define WEFT_WORKER_BACKENDS_FORWARD_STEPPER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/plan/state_cache.h"
#include "common/sampling/sampler.h"
#include "worker/backends/backend.h"

namespace weft {

class ForwardStepper {
 public:
  explicit ForwardStepper(int32_t vocab_size) : sampler_(vocab_size) {}

  absl::Status Step(Backend& backend, const StepBatch& batch, StepOutput* out);

 private:
  // Device sampling of the entries that want no logprobs; false when the backend samples
  // on the host only (then nothing is filled).
  absl::StatusOr<bool> SampleOnDevice(Backend& backend, const StepBatch& batch,
                                      StepOutput* out);
  int32_t RowOf(const ScheduledSequence& sc, size_t index) const {
    return sc.logits_from >= 0 ? row_of_entry_[sc.logits_from] : row_of_entry_[index];
  }

  Sampler sampler_;
  ForwardBatch forward_;
  ForwardOutput logits_;
  std::vector<int32_t> row_of_entry_;
  std::vector<SamplerParams> device_params_;
  std::vector<Backend::SampleRequest> device_requests_;
  std::vector<int32_t> device_slots_;  // StepOutput index of each device request
  std::vector<int32_t> device_tokens_;
};

}  // namespace weft

#endif  // WEFT_WORKER_BACKENDS_FORWARD_STEPPER_H_

// Plan codec: the scheduler core's plain-data StepPlan and SampledTokens <-> the worker
// protocol's messages (proto/weft/v1/worker.proto). The one place where the two meet.
//
// Sequence ids on the wire: seq_id = request_id * 256 + sample_index (n <= 16).
// Thread-safety: pure functions.
#ifndef WEFT_SCHEDULER_SERVICE_PLAN_CODEC_H_
#define WEFT_SCHEDULER_SERVICE_PLAN_CODEC_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "scheduler/step_plan.h"
#include "scheduler/types.h"
#include "weft/v1/worker.pb.h"

namespace weft {

inline int64_t WireSeqId(SequenceRef ref) {
  return ref.request_id.value() * 256 + ref.sample_index;
}
inline SequenceRef FromWireSeqId(int64_t id) {
  return SequenceRef{RequestId(id / 256), static_cast<int32_t>(id % 256)};
}

// Fills `out` (cleared first) from `plan`. `sample_order` receives the sequences whose
// tokens the result must carry, in result order.
void EncodePlan(const StepPlan& plan, weft::v1::StepPlan* out,
                std::vector<SequenceRef>* sample_order);

// Checks that `result` carries exactly one token per entry of `sample_order`, in order,
// each below `vocab_size`, and converts them. INVALID_ARGUMENT otherwise (fence).
absl::Status DecodeTokens(const weft::v1::StepResult& result,
                          const std::vector<SequenceRef>& sample_order, int32_t vocab_size,
                          std::vector<SampledToken>* tokens);

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_PLAN_CODEC_H_

// Small value types shared by the scheduler core: replica ids, finish reasons, and the
// plain-data records that cross the scheduler/service boundary. The request contract is
// request_spec.h; what crosses the scheduler/worker boundary (SequenceRef, the plan) is
// common/plan's.
//
// Everything here is plain data (proto-friendly: ints, strings, vectors), copyable,
// and carries no behaviour beyond validation and naming.
// Thread-safety: value types.
#ifndef WEFT_SCHEDULER_TYPES_H_
#define WEFT_SCHEDULER_TYPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/plan/step_plan.h"
#include "common/strong_id.h"

namespace weft {

struct ReplicaIdTag {};
// A data-parallel replica (one TP group of workers) as the scheduler numbers it.
using ReplicaId = StrongId<ReplicaIdTag, int32_t>;

// Why a sequence ended. kNone while it runs.
enum class FinishReason : uint8_t {
  kNone = 0,
  kLength,       // max_tokens reached
  kStopEos,      // an end-of-sequence token (unless ignore_eos)
  kStopToken,    // one of the request's stop_token_ids
  kStopString,   // one of the request's stop strings matched in the text
  kCancelled,    // the client cancelled
  kDeadline,     // the request's deadline passed
  kUnavailable,  // its replica went away and the retry cap was reached (or none is left)
  kError,        // a worker reported an error for it
};

absl::string_view FinishReasonName(FinishReason reason);
// The OpenAI-style coarse reason: "length", "stop", "cancelled", "deadline", ...
absl::string_view FinishReasonApiName(FinishReason reason);

// Usage of one request, reported with its last sequence's final output.
struct RequestUsage {
  int32_t num_prompt_tokens = 0;
  int32_t num_cached_prompt_tokens = 0;  // prefix-cache hit at first admission
  int32_t num_completion_tokens = 0;     // all samples together
  int32_t num_preemptions = 0;
  int32_t num_retries = 0;
  uint64_t seed = 0;
  absl::Time arrival_time = absl::InfinitePast();
  absl::Time first_scheduled_time = absl::InfiniteFuture();  // never scheduled: future
  absl::Time first_token_time = absl::InfiniteFuture();      // no token yet: future
  absl::Time finish_time = absl::InfiniteFuture();
};

// A client-visible event for one sequence: new tokens, the text that may be streamed
// now, and, once, its finish. Text deltas are valid UTF-8, never retracted.
struct SequenceOutput {
  SequenceRef seq;
  absl::InlinedVector<int32_t, 2> new_token_ids;
  std::string text_delta;
  FinishReason finish_reason = FinishReason::kNone;
  // True on the output that finishes the request's last sequence; `usage` is then set
  // (only then: a per-token output stays small).
  bool request_finished = false;
  // The `aux` of the StepToken that produced new_token_ids[0]; -1 when none. Lets the
  // services layer attach per-token data (logprobs) the core does not look at.
  int32_t token_aux = -1;
  std::optional<RequestUsage> usage;
};

// A copy-on-write block copy: the worker copies every KV slot of block `src` into block
// `dst` (the plan lists it as a weft.v1.KvBlockCopy; see StepPlan for when).
struct KvBlockCopy {
  BlockId src;
  BlockId dst;

  friend bool operator==(const KvBlockCopy& a, const KvBlockCopy& b) {
    return a.src == b.src && a.dst == b.dst;
  }
};

// One sampled token of a step's result as the core takes it (a weft.v1.StepToken's
// sequence and token), in the order StepPlan documents.
struct StepToken {
  SequenceRef seq;
  int32_t token_id = 0;
  // Opaque to the core; copied to SequenceOutput::token_aux (e.g. an index into the
  // step's logprobs).
  int32_t aux = -1;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_TYPES_H_

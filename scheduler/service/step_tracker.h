// StepTracker: one replica's steps in flight as its ranks see them — adaptive deadlines,
// result collection from every rank, and the check that ranks agree. What a step holds
// (its sequences, their samples) is the scheduler core's (Scheduler::ApplyResults /
// FailStep); this knows only step ids, token counts and times.
//
// Deadline of a step (DESIGN.md, Operations): max(floor, k x the replica's moving
// average of seconds per planned token x tokens in this plan). Each full deadline period
// that passes without the step's results counts one miss; `max_misses` consecutive misses
// mean the replica should be fenced. A completed step resets the count.
// Agreement: every rank sends tokens_hash = TokensHash(its tokens); rank 0 also sends
// the tokens. The step completes when all ranks answered; any hash that differs from
// the hash of rank 0's tokens is a disagreement (fence).
// Thread-safety: not thread-safe; owned by the planning thread.
#ifndef WEFT_SCHEDULER_SERVICE_STEP_TRACKER_H_
#define WEFT_SCHEDULER_SERVICE_STEP_TRACKER_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/tokens_hash.h"
#include "weft/v1/worker.pb.h"

namespace weft {

struct StepDeadlineOptions {
  absl::Duration floor = absl::Seconds(10);
  double k = 8.0;
  double ewma_alpha = 0.2;
  int max_misses = 2;

  absl::Status Validate() const;
};

class StepTracker {
 public:
  StepTracker(StepDeadlineOptions options, int32_t world_size)
      : options_(options), world_size_(world_size) {}

  void OnPlanSent(int64_t step_id, int32_t num_tokens, absl::Time now);

  enum class Outcome { kIncomplete, kComplete, kDisagree, kError, kUnexpected };
  struct ResultOutcome {
    Outcome outcome = Outcome::kIncomplete;
    int64_t step_id = 0;            // but kUnexpected
    absl::Time sent;                // when its plan was sent (but kUnexpected)
    std::string message;            // kDisagree / kError / kUnexpected
    weft::v1::StepResult result;    // kComplete / kError: rank 0's result
  };
  // Adds one rank's result for a step in flight. Returns the outcomes of the steps this
  // completes, oldest first (a step completes only after every earlier one: with
  // pipelining, rank 1's answer for step t+1 may arrive before rank 0's for step t).
  // An unknown step or a repeated rank gives a single kUnexpected outcome. Rank 0's
  // result is moved into its outcome, not copied (a token entry per sequence a step).
  std::vector<ResultOutcome> OnResult(weft::v1::StepResult&& result, absl::Time now);

  // Counts misses; true when the replica must be fenced.
  bool CheckDeadline(absl::Time now);
  // When CheckDeadline next needs to run (InfiniteFuture when nothing is in flight).
  absl::Time NextDeadline() const;

  int num_in_flight() const { return static_cast<int>(steps_.size()); }
  int misses() const { return misses_; }
  double seconds_per_token() const { return seconds_per_token_; }
  absl::Duration DeadlineFor(int32_t num_tokens) const;

 private:
  struct InFlight {
    int64_t step_id = 0;
    int32_t num_tokens = 0;
    absl::Time sent;
    absl::Time started;   // when it became the oldest in flight (pipelining)
    absl::Duration deadline;
    std::vector<bool> answered;
    int num_answered = 0;
    weft::v1::StepResult rank0;
    std::vector<uint64_t> hashes;
    std::string error;
  };

  ResultOutcome Complete(InFlight done, absl::Time now);

  const StepDeadlineOptions options_;
  const int32_t world_size_;
  std::deque<InFlight> steps_;
  double seconds_per_token_ = 0;  // 0 until the first completed step
  int misses_ = 0;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_STEP_TRACKER_H_

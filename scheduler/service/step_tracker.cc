#include "scheduler/service/step_tracker.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace weft {

absl::Status StepDeadlineOptions::Validate() const {
  if (floor <= absl::ZeroDuration()) return absl::InvalidArgumentError("step deadline floor must be > 0");
  if (k <= 0) return absl::InvalidArgumentError("step deadline k must be > 0");
  if (ewma_alpha <= 0 || ewma_alpha > 1) return absl::InvalidArgumentError("ewma alpha in (0, 1]");
  if (max_misses < 1) return absl::InvalidArgumentError("max misses must be >= 1");
  return absl::OkStatus();
}

absl::Duration StepTracker::DeadlineFor(int32_t num_tokens) const {
  const absl::Duration adaptive = absl::Seconds(options_.k * seconds_per_token_ * num_tokens);
  return std::max(options_.floor, adaptive);
}

void StepTracker::OnPlanSent(int64_t step_id, int32_t num_tokens, absl::Time now) {
  InFlight s;
  s.step_id = step_id;
  s.num_tokens = num_tokens;
  s.sent = now;
  s.started = now;
  s.deadline = DeadlineFor(num_tokens);
  s.answered.assign(world_size_, false);
  s.hashes.assign(world_size_, 0);
  steps_.push_back(std::move(s));
}

std::vector<StepTracker::ResultOutcome> StepTracker::OnResult(
    weft::v1::StepResult&& result, absl::Time now) {
  std::vector<ResultOutcome> outs;
  auto it = std::find_if(steps_.begin(), steps_.end(),
                         [&](const InFlight& s) { return s.step_id == result.step_id(); });
  const int rank = result.rank();
  if (it == steps_.end() || rank < 0 || rank >= world_size_ || it->answered[rank]) {
    ResultOutcome out;
    out.outcome = Outcome::kUnexpected;
    out.message = absl::StrCat("unexpected result from rank ", rank, " for step ",
                               result.step_id(), " (", steps_.size(), " steps in flight)");
    outs.push_back(std::move(out));
    return outs;
  }
  InFlight& s = *it;
  s.answered[rank] = true;
  ++s.num_answered;
  s.hashes[rank] = result.tokens_hash();
  if (!result.error().empty() && s.error.empty()) {
    s.error = absl::StrCat("rank ", rank, ": ", result.error());
  }
  if (rank == 0) s.rank0 = std::move(result);  // same arena (none): a swap
  while (!steps_.empty() && steps_.front().num_answered == world_size_) {
    InFlight done = std::move(steps_.front());
    steps_.pop_front();
    misses_ = 0;
    if (!steps_.empty()) steps_.front().started = now;
    outs.push_back(Complete(std::move(done), now));
  }
  return outs;
}

StepTracker::ResultOutcome StepTracker::Complete(InFlight done, absl::Time now) {
  ResultOutcome out;
  out.step_id = done.step_id;
  out.sent = done.sent;
  if (!done.error.empty()) {
    out.outcome = Outcome::kError;
    out.message = done.error;
    out.result = std::move(done.rank0);
    return out;
  }
  const uint64_t expect = TokensHash(done.rank0);
  for (int r = 0; r < world_size_; ++r) {
    if (done.hashes[r] != expect) {
      out.outcome = Outcome::kDisagree;
      out.message = absl::StrCat("rank ", r, " sampled different tokens than rank 0 in step ",
                                 done.step_id);
      return out;
    }
  }
  if (done.num_tokens > 0) {
    const double sample = absl::ToDoubleSeconds(now - done.started) / done.num_tokens;
    seconds_per_token_ = seconds_per_token_ == 0
                             ? sample
                             : (1 - options_.ewma_alpha) * seconds_per_token_ +
                                   options_.ewma_alpha * sample;
  }
  out.outcome = Outcome::kComplete;
  out.result = std::move(done.rank0);
  return out;
}

absl::Time StepTracker::NextDeadline() const {
  if (steps_.empty()) return absl::InfiniteFuture();
  const InFlight& s = steps_.front();
  return s.started + s.deadline * (misses_ + 1);
}

bool StepTracker::CheckDeadline(absl::Time now) {
  if (steps_.empty()) return false;
  while (now >= NextDeadline() && misses_ < options_.max_misses) ++misses_;
  return misses_ >= options_.max_misses;
}

}  // namespace weft

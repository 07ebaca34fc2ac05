// StreamInterval: the policy that decides whether a sample's new tokens go to its
// client stream now or wait to travel with the next ones (--stream_interval_tokens,
// --stream_interval_min_streams, --stream_interval_max_hold_ms).
//
// A stream message (one gRPC write: a sendmsg and a completion woken on a gRPC thread)
// is the largest share of the scheduler's CPU per token (tools/bench/README.md), so at
// large batches tokens travel in groups. Holding is adaptive, so that it is never seen
// where latency matters:
//   * only in a delivery pass that feeds at least `min_streams` streams (a large batch:
//     a small one gets every token as it comes, as without the policy);
//   * only while the sample's tokens come fast: 3 gaps like its last one fit in
//     `max_hold` (fewer for an interval under 4 tokens: `tokens - 1`), so a CPU
//     backend's slow steps never hold;
//   * only while the next token is expected in time: the request's oldest held token
//     has waited `held_for`, and `held_for` + the last gap fits in `max_hold` (one slow
//     step in a fast run releases nothing early: the budget, not the gap, ends a hold);
//   * never the stream's first message nor a sample's last (ClientStreams);
//   * never longer than about `max_hold` (ClientStreams flushes overdue tokens, e.g. of a
//     sequence that was preempted while it held some).
// Thread-safety: immutable after construction.
#ifndef WEFT_SCHEDULER_SERVICE_STREAM_INTERVAL_H_
#define WEFT_SCHEDULER_SERVICE_STREAM_INTERVAL_H_

#include <algorithm>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace weft {

struct StreamIntervalOptions {
  // Most tokens one message carries while holding; 1 never holds (one message a step).
  int tokens = 8;
  // Holds only in delivery passes that feed at least this many streams; 1: always.
  int min_streams = 64;
  // The longest a token waits; also bounds the step gap at which holding starts.
  absl::Duration max_hold = absl::Milliseconds(25);

  absl::Status Validate() const;
};

class StreamInterval {
 public:
  explicit StreamInterval(StreamIntervalOptions options = {}) : options_(options) {}

  // True when a sample's tokens, `held_tokens` of them with this step's, may wait for
  // the next step: the pass feeds `streams_fed` streams, the sample's previous token
  // came `gap` before this one, and its request's oldest held token has waited
  // `held_for` (zero when none is held).
  bool Hold(int streams_fed, int held_tokens, absl::Duration gap,
            absl::Duration held_for) const {
    return options_.tokens > 1 && held_tokens < options_.tokens &&
           streams_fed >= options_.min_streams && gap * FastGaps() <= options_.max_hold &&
           held_for + gap <= options_.max_hold;
  }
  // True when tokens held since `since` must go out at `now`.
  bool Overdue(absl::Time since, absl::Time now) const {
    return now - since >= options_.max_hold;
  }
  // Holding is possible at all (tokens > 1).
  bool enabled() const { return options_.tokens > 1; }
  absl::Duration max_hold() const { return options_.max_hold; }

 private:
  // How many gaps like the last must fit in max_hold for tokens to count as fast.
  int FastGaps() const { return std::min(options_.tokens, 4) - 1; }

  StreamIntervalOptions options_;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_STREAM_INTERVAL_H_

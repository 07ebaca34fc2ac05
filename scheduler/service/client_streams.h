// ClientStreams: the engine's admission and outboxes — the generation calls it serves.
//
// Admits each Submission into the scheduler core (or ends its call with the core's
// refusal), cancels a call by its key, and streams the core's outputs into each call's
// Outbox: tokens, text, logprobs (kept for the tokens of the step just applied, for the
// requests that asked), finish reason and usage; a finished request ends its call with
// the status of its finish reason. Readers that do not keep up are ended
// RESOURCE_EXHAUSTED: an outbox over its byte cap at once, one whose responses wait
// longer than `stall_timeout` at the next check (Abort: this also ends a call whose
// client never reads, which holds a write in flight forever). A finished request's call
// may still be writing its last responses: it is watched until it ends.
// Every ending is an absl::Status (translated at the RPC edge, response_stream.h).
// Thread-safety: not thread-safe; owned by the engine's planning thread.
#ifndef WEFT_SCHEDULER_SERVICE_CLIENT_STREAMS_H_
#define WEFT_SCHEDULER_SERVICE_CLIENT_STREAMS_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "scheduler/scheduler.h"
#include "scheduler/service/engine_interface.h"
#include "scheduler/service/metrics.h"
#include "scheduler/service/stream_interval.h"
#include "weft/v1/worker.pb.h"

namespace weft {

class ClientStreams {
 public:
  // `core`, `text` (may be null) and `metrics` outlive this.
  ClientStreams(Scheduler* core, const TokenTextSource* text, ServiceMetrics* metrics,
                absl::Duration stall_timeout);

  // Adds the request to the core; a refusal ends its call with the core's status.
  // `grammar`: the compiled constraint of a request that has one (GrammarAdmission).
  void Admit(Submission& submission, absl::Time now,
             std::shared_ptr<const SequenceGrammarFactory> grammar = nullptr);
  // The client went away: the core ends the request (its blocks are freed).
  void Cancel(int64_t key, absl::Time now);
  // Keeps a sampled token's logprobs for Deliver when its request asked for them.
  // Returns the index for StepToken::aux, or -1 (none asked for).
  int32_t KeepLogprobs(const weft::v1::SampledToken& token);
  // Streams the core's outputs; ends the calls of finished requests.
  void Deliver(absl::Time now);
  // Request deadlines, and (every 100 ms) readers that stalled.
  void CheckTimers(absl::Time now);
  // Ends every request with `reason` (delivering what the core gives back), and every
  // call the core no longer knows UNAVAILABLE.
  void EndAll(FinishReason reason, absl::Time now);

  size_t size() const { return requests_.size(); }
  // When a sample's tokens may wait to travel with its next ones (stream_interval.h):
  // held tokens go out with the sample's next message, once the interval is full, with
  // the stream's last message, or once overdue (CheckTimers). Set before the first Admit.
  void set_stream_interval(StreamIntervalOptions options) { interval_ = StreamInterval(options); }

 private:
  struct ActiveRequest {
    int64_t key = 0;
    std::shared_ptr<Outbox> outbox;
    int32_t num_logprobs = -1;
    uint64_t seed = 0;
    absl::Time arrival;
    AccessIdentity who;
    std::vector<absl::Time> last_token_time;  // per sample
    bool sent_first = false;
    bool got_first_token = false;
    // Set when the engine ended the call itself (slow reader): the status the client
    // gets, counted instead of the core's finish reason.
    std::optional<absl::Status> ended_with;
    // Per sample: tokens held back for the stream interval (sized at the first hold).
    std::vector<weft::v1::GenerateResponse> held;
    // When the oldest of the held tokens was held (InfiniteFuture: none held), and
    // whether the request is listed in holding_.
    absl::Time held_since = absl::InfiniteFuture();
    bool listed_holding = false;
  };
  // Per-token logprobs of the results applied this iteration (StepToken::aux indexes it).
  struct TokenLogprobs {
    float logprob = 0;
    std::vector<std::pair<int32_t, float>> top;
  };

  // `out` as the call's next response; `ar` records what was sent and when.
  weft::v1::GenerateResponse Response(const SequenceOutput& out, ActiveRequest& ar,
                                      absl::Time now);
  // Ends the call of a finished request and forgets the request.
  void EndRequest(absl::flat_hash_map<RequestId, ActiveRequest>::iterator it,
                  const SequenceOutput& out, absl::Time now);
  void CheckStalls(absl::Time now);
  // The stream interval: false when `resp` is held back (merged into the sample's held
  // tokens); true when it is to be pushed now, with what was held merged in front.
  // `streams_fed`: streams that got tokens in this pass; `gap`: since the sample's
  // previous token.
  bool ReleaseNow(ActiveRequest& ar, const SequenceOutput& out, int streams_fed,
                  absl::Duration gap, absl::Time now, weft::v1::GenerateResponse* resp);
  // Pushes the held tokens of every sample of `ar` but `except_sample` (-1: none).
  void PushHeld(ActiveRequest& ar, RequestId id, bool request_finished, int except_sample,
                absl::Time now);
  // Pushes what requests held longer than the interval allows.
  void FlushOverdue(absl::Time now);
  // Pushes `resp` to the call; a push that fails ends the request (not reading, gone).
  void PushOrEnd(ActiveRequest& ar, RequestId id, bool request_finished,
                 weft::v1::GenerateResponse resp, absl::Time now);

  Scheduler* const core_;
  const TokenTextSource* const text_;
  ServiceMetrics* const metrics_;
  const absl::Duration stall_timeout_;
  StreamInterval interval_;

  absl::flat_hash_map<RequestId, ActiveRequest> requests_;
  absl::flat_hash_map<int64_t, RequestId> by_key_;
  // Requests in requests_ that asked for logprobs: none, and KeepLogprobs looks nothing up.
  int num_logprobs_requests_ = 0;
  // Calls of finished requests still writing their last responses (see CheckStalls).
  std::vector<std::shared_ptr<Outbox>> lingering_;
  std::vector<SequenceOutput> outputs_;
  std::vector<TokenLogprobs> step_logprobs_;
  absl::Time last_stall_check_ = absl::InfinitePast();
  // Requests that may hold tokens (FlushOverdue), each listed once.
  std::vector<RequestId> holding_;
  absl::Time last_hold_check_ = absl::InfinitePast();
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_CLIENT_STREAMS_H_

// WriteQueue: the write side of one streaming call, shared by everything the scheduler
// streams to: a client's Generate call (Outbox; written by the gRPC reactor or by an
// OpenAI HTTP call), a worker's Attach stream (WorkerHandle) and a health Watch
// (HealthService). Other threads queue
// messages and ask for the end of the call; the queue hands the call one write at a time
// and, once everything before it is written, the Finish — exactly once, even when the
// call breaks or is cancelled while a write is in flight (then the write completes not
// ok, the rest is dropped and the Finish starts: a call that is never finished keeps the
// server's Shutdown waiting).
//
// A client that never reads leaves a write pending forever (its HTTP/2 window is
// closed): Abort cancels the call in the transport, which completes that write, so the
// call still ends. Queued bytes are capped (Push fails beyond the cap) and the age of the
// oldest unwritten message is tracked (Stalled), so a slow reader can be ended.
//
// The call is reached through WriteTarget, the transport boundary: the gRPC reactors and
// the HTTP call implement it, and tests drive a WriteQueue with a fake target, no gRPC
// threads.
// Statuses are absl::Status everywhere on this side; a gRPC target translates once, at
// the RPC edge (ToGrpcStatus), an HTTP one through its API's error table.
// Ownership: the queue outlives the call (held by shared_ptr by whoever writes); after
// the call is done, Push and Finish are harmless no-ops. The queue holds its target from
// Attach until OnCallDone (see Attach for targets that gRPC owns).
// Thread-safety: every method is thread-safe; no lock is held while calling the target.
#ifndef WEFT_SCHEDULER_SERVICE_WRITE_QUEUE_H_
#define WEFT_SCHEDULER_SERVICE_WRITE_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/support/status.h"
#include "weft/v1/generate.pb.h"

namespace weft {

// One call's write side, as a WriteQueue drives it. The queue calls these from any
// thread, never with its lock held; none may block.
template <typename Message>
class WriteTarget {
 public:
  virtual ~WriteTarget() = default;
  // Starts writing `message` (valid until the queue's OnWriteDone); one at a time.
  virtual void WriteMessage(const Message* message) = 0;
  // Ends the call with `status`; called once, with no write in flight. The target calls
  // the queue's OnCallDone once the call is over.
  virtual void FinishCall(const absl::Status& status) = 0;
  // Cancels the call in the transport (a pending write then completes not ok); called
  // only while a write is in flight.
  virtual void CancelCall(const absl::Status& status) = 0;
};

// A target the queue must not own: a gRPC reactor, which gRPC deletes after OnDone. The
// queue calls it only for a write or a finish it started, and gRPC ends no reactor with
// either pending, so it is alive whenever the queue calls it.
template <typename Message>
std::shared_ptr<WriteTarget<Message>> NotOwned(WriteTarget<Message>* target) {
  return std::shared_ptr<WriteTarget<Message>>(std::shared_ptr<void>(), target);
}

// The gRPC edge. The one translation of a status to gRPC's (same codes, same message).
grpc::Status ToGrpcStatus(const absl::Status& status);
// A gRPC WriteTarget's CancelCall for a callback server call (null: nothing to cancel).
void CancelServerCall(grpc::CallbackServerContext* context, const absl::Status& status);

// What the byte cap counts of a message.
inline size_t WireBytes(const weft::v1::GenerateResponse& m) { return m.ByteSizeLong(); }
inline size_t WireBytes(const grpc::ByteBuffer& b) { return b.Length(); }
inline size_t WireBytes(const grpc::health::v1::HealthCheckResponse& m) { return m.ByteSizeLong(); }

// Coalescing (Options::coalesce): merges `next` into `into`, the last message still
// queued behind a write in flight, when the two can travel as one; false (both left
// as they are) otherwise. A Generate response carries the tokens, text and logprobs
// generated since the previous message of its sample, so two consecutive responses of
// the same sample are one response with both deltas appended, as long as the earlier
// one does not end the sample (finish reason, usage) and the later one does not start
// it (seed, request id). Pre-serialized bytes never merge.
bool Coalesce(weft::v1::GenerateResponse* into, weft::v1::GenerateResponse* next);
inline bool Coalesce(grpc::ByteBuffer*, grpc::ByteBuffer*) { return false; }
// A health status replaces the one queued before it: only the latest matters.
inline bool Coalesce(grpc::health::v1::HealthCheckResponse* into,
                     grpc::health::v1::HealthCheckResponse* next) {
  *into = *next;
  return true;
}

template <typename Message>
class WriteQueue {
 public:
  struct Options {
    size_t max_bytes = std::numeric_limits<size_t>::max();
    // Finish with an error status drops what is still queued (a Generate stream ending
    // in error), rather than writing it first (a worker's Reject before its close).
    bool error_drops_queued = false;
    // A message pushed while a write is in flight merges into the last one queued
    // when it can (Coalesce): a reader that keeps up gets one message per Push, one
    // that lags gets fewer, larger messages, never later ones. Off: one write per Push.
    bool coalesce = false;
  };
  explicit WriteQueue(Options options) : options_(options) {}

  // Queues a message. False (and dropped) when the call is gone, its finish was asked
  // for, or the queue is over its byte cap.
  bool Push(Message message) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the call with `status` once everything queued before is written (see
  // Options::error_drops_queued).
  void Finish(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the call with error `status` now: queued messages are dropped and a pending
  // write is cut short by cancelling the call in the transport (the client then sees
  // `status` where the trailers still get through, else a cancellation).
  void Abort(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  // True when messages have waited longer than `timeout` without a write completing.
  bool Stalled(absl::Time now, absl::Duration timeout) const ABSL_LOCKS_EXCLUDED(mu_);
  // Finish or Abort was called, or the call is over.
  bool Closed() const ABSL_LOCKS_EXCLUDED(mu_);
  // The call is over (gRPC is done with it).
  bool Done() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t queued_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  // Messages pushed so far that merged into one queued before them (Options::coalesce).
  uint64_t coalesced() const ABSL_LOCKS_EXCLUDED(mu_);

  // The transport side. Attach once the call exists (messages pushed before wait); the
  // queue keeps `target` alive until OnCallDone, so a call that ends on its own thread
  // (an HTTP client leaving) cannot free it under a write the queue is starting.
  // OnWriteDone for each write; OnCallDone when the call is over (the target is
  // released and not used afterwards).
  void Attach(std::shared_ptr<WriteTarget<Message>> target) ABSL_LOCKS_EXCLUDED(mu_);
  void OnWriteDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_);
  void OnCallDone() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Starts the next write, or the finish when nothing is left; nothing while a write is
  // in flight.
  void Pump() ABSL_LOCKS_EXCLUDED(mu_);
  void DropQueued() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable Mutex mu_;
  std::shared_ptr<WriteTarget<Message>> target_ ABSL_GUARDED_BY(mu_);
  std::deque<Message> queue_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t coalesced_ ABSL_GUARDED_BY(mu_) = 0;
  Message in_flight_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_started_ ABSL_GUARDED_BY(mu_) = false;
  // Abort is cancelling the call outside mu_: Pump must not start the finish (which
  // lets gRPC delete the reactor) until it is done.
  bool cancelling_ ABSL_GUARDED_BY(mu_) = false;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status finish_status_ ABSL_GUARDED_BY(mu_);
  absl::Time oldest_unwritten_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
};

extern template class WriteQueue<weft::v1::GenerateResponse>;
extern template class WriteQueue<grpc::ByteBuffer>;
extern template class WriteQueue<grpc::health::v1::HealthCheckResponse>;

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_WRITE_QUEUE_H_

// ResponseStream: one generation call's bounded outbox, and the gRPC server-streaming
// reactor that writes it to a Generate client.
//
// The planning thread pushes responses (never blocks); the outbox's writer (the gRPC
// reactor here, or an OpenAI HTTP call: http_server.h) writes them to the client one at
// a time. A reader that does not keep up fills the outbox: the planning
// thread sees it through `Stalled()` and ends the request with `Abort(RESOURCE_EXHAUSTED)`,
// so a slow client never slows the others and its buffer stays under its cap. The gRPC
// call is a raw one (Generate parses its request by hand: request_parse.h), so the
// reactor's writer serializes each GenerateResponse into a grpc::ByteBuffer. A client
// that never reads at all leaves a write pending forever (its HTTP/2 window is closed):
// Abort then cancels the call in the transport, which completes that write, so the call
// still ends and gives back its stream slot.
//
// Ownership: gRPC owns the reactor until OnDone; the planning thread holds a
// shared_ptr<Outbox> that outlives it, so pushes after the call ended are harmless
// no-ops. The outbox holds its writer by shared_ptr until the call is done.
// Thread-safety: Outbox methods are thread-safe.
#ifndef WEFT_SCHEDULER_SERVICE_RESPONSE_STREAM_H_
#define WEFT_SCHEDULER_SERVICE_RESPONSE_STREAM_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>

#include "absl/time/time.h"
#include "common/mutex.h"
#include "grpcpp/grpcpp.h"
#include "weft/v1/generate.pb.h"

namespace weft {

// What drains an Outbox to one client. The Outbox calls these without holding its lock:
// at most one StartWrite in flight, each answered by Outbox::OnWriteDone; FinishCall at
// most once and after the last write completed; CancelCall only while a write is in
// flight (Abort), to cut it short. None may block.
class OutboxWriter {
 public:
  virtual ~OutboxWriter() = default;
  // Starts writing `response`, which stays valid until the writer calls OnWriteDone.
  virtual void StartWrite(const weft::v1::GenerateResponse* response) = 0;
  // Ends the call with `status`; the writer then calls OnCallDone once the call is over.
  virtual void FinishCall(const grpc::Status& status) = 0;
  // Breaks the call in the transport so that the write in flight completes (not ok).
  virtual void CancelCall(const grpc::Status& status) = 0;
};

class Outbox {
 public:
  explicit Outbox(size_t max_bytes) : max_bytes_(max_bytes) {}

  // Queues a response. Returns false (and drops it) when the call is gone or the
  // outbox is over its byte cap.
  bool Push(weft::v1::GenerateResponse response) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the call with `status` once everything queued before has been written (an
  // error status skips what is still queued).
  void Finish(const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the call with error `status` now, even when a write is stuck behind a client
  // that does not read: queued responses are dropped and a pending write is cut short by
  // cancelling the call in the transport (the client then sees the status the transport
  // can still deliver: `status` where the trailers get through, else a cancellation).
  void Abort(const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  // True when responses have waited longer than `timeout` without a write completing.
  bool Stalled(absl::Time now, absl::Duration timeout) const ABSL_LOCKS_EXCLUDED(mu_);
  // Finish or Abort was called, or the call is over.
  bool Closed() const ABSL_LOCKS_EXCLUDED(mu_);
  // The call is over (gRPC is done with it).
  bool Done() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t queued_bytes() const ABSL_LOCKS_EXCLUDED(mu_);

  // Writer side (OutboxWriter implementations). Responses pushed before Attach wait.
  void Attach(std::shared_ptr<OutboxWriter> writer) ABSL_LOCKS_EXCLUDED(mu_);
  // The write started by StartWrite is over; !ok: the call is broken.
  void OnWriteDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_);
  // The call is over: nothing more is written; the writer is released.
  void OnCallDone() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Starts the next write or the finish if nothing is in flight. Called without mu_.
  void Pump() ABSL_LOCKS_EXCLUDED(mu_);

  const size_t max_bytes_;
  mutable Mutex mu_;
  std::shared_ptr<OutboxWriter> writer_ ABSL_GUARDED_BY(mu_);
  std::deque<weft::v1::GenerateResponse> queue_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_started_ ABSL_GUARDED_BY(mu_) = false;
  // Abort is cancelling the call outside mu_: Pump must not start the Finish (which
  // lets gRPC delete the reactor) until it is done.
  bool cancelling_ ABSL_GUARDED_BY(mu_) = false;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status finish_status_ ABSL_GUARDED_BY(mu_);
  absl::Time oldest_unwritten_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  weft::v1::GenerateResponse in_flight_ ABSL_GUARDED_BY(mu_);
};

// The gRPC writer of a Generate call (a raw method: responses go out serialized).
class ResponseReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // `on_cancel` runs (once) when the client cancels or the call breaks before Finish.
  // `context` (may be null: calls that are finished at once) lets Outbox::Abort cancel
  // the call in the transport.
  ResponseReactor(std::shared_ptr<Outbox> outbox, std::function<void()> on_cancel,
                  std::function<void()> on_done, grpc::CallbackServerContext* context = nullptr);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // The Outbox's view of this reactor (gRPC owns the reactor; the outbox owns this).
  class Writer;
  // Cancels the call in the transport with `status` (pending operations then fail).
  void CancelCall(const grpc::Status& status);

  std::shared_ptr<Outbox> outbox_;
  grpc::CallbackServerContext* const context_;
  std::function<void()> on_cancel_;
  std::function<void()> on_done_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_RESPONSE_STREAM_H_

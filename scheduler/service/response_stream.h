// ResponseStream: one Generate call's server-streaming reactor and its bounded outbox.
//
// The planning thread pushes responses (never blocks); the reactor writes them to the
// client one at a time (WriteQueue). A reader that does not keep up fills the outbox:
// the planning thread sees it through `Stalled()` and ends the request with
// `Abort(RESOURCE_EXHAUSTED)`, so a slow client never slows the others and its buffer
// stays under its cap; Abort also ends a call whose client never reads at all.
//
// Ownership: gRPC owns the reactor until OnDone; the planning thread holds a
// shared_ptr<Outbox> that outlives it, so pushes after the call ended are harmless
// no-ops. Thread-safety: Outbox methods are thread-safe.
#ifndef WEFT_SCHEDULER_SERVICE_RESPONSE_STREAM_H_
#define WEFT_SCHEDULER_SERVICE_RESPONSE_STREAM_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "grpcpp/grpcpp.h"
#include "scheduler/service/write_queue.h"
#include "weft/v1/generate.pb.h"

namespace weft {

// A Generate call's responses, capped at `max_bytes` queued; a Finish with an error
// status drops what is still queued.
class Outbox : public WriteQueue<weft::v1::GenerateResponse> {
 public:
  explicit Outbox(size_t max_bytes)
      : WriteQueue(Options{max_bytes, /*error_drops_queued=*/true}) {}
};

class ResponseReactor : public grpc::ServerWriteReactor<weft::v1::GenerateResponse>,
                        public WriteTarget<weft::v1::GenerateResponse> {
 public:
  // `on_cancel` runs (once) when the client cancels or the call breaks before Finish.
  // `context` (may be null: calls that are finished at once) lets Outbox::Abort cancel
  // the call in the transport.
  ResponseReactor(std::shared_ptr<Outbox> outbox, std::function<void()> on_cancel,
                  std::function<void()> on_done, grpc::CallbackServerContext* context = nullptr);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  // WriteTarget.
  void WriteMessage(const weft::v1::GenerateResponse* response) override;
  void FinishCall(const grpc::Status& status) override;
  void CancelCall(const grpc::Status& status) override;

 private:
  std::shared_ptr<Outbox> outbox_;
  grpc::CallbackServerContext* const context_;
  std::function<void()> on_cancel_;
  std::function<void()> on_done_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_RESPONSE_STREAM_H_

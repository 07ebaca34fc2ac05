// ResponseStream: one generation call's bounded outbox, and the gRPC server-streaming
// reactor that writes it to a Generate client.
//
// The planning thread pushes responses (never blocks); the outbox's writer (the gRPC
// reactor here, or an OpenAI HTTP call: http_server.h) writes them to the client one at
// a time (WriteQueue). A reader that does not keep up fills the outbox: the planning
// thread sees it through `Stalled()` and ends the request with `Abort(RESOURCE_EXHAUSTED)`,
// so a slow client never slows the others and its buffer stays under its cap; Abort also
// ends a call whose client never reads at all. The gRPC call is a raw one (Generate
// parses its request by hand: request_parse.h), so the reactor serializes each
// GenerateResponse into a grpc::ByteBuffer as it starts its write.
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

// A generation call's responses, capped at `max_bytes` queued; a Finish with an error
// status drops what is still queued. Responses pushed while a write is in flight merge
// into the last one queued for the same sample (WriteQueue::Options::coalesce): a
// reader that keeps up gets one message per step, one that lags gets every token, in
// order, in fewer messages, with no token held back for it.
class Outbox : public WriteQueue<weft::v1::GenerateResponse> {
 public:
  explicit Outbox(size_t max_bytes)
      : WriteQueue(Options{max_bytes, /*error_drops_queued=*/true, /*coalesce=*/true}) {}
};

// The gRPC writer of a Generate call (a raw method: responses go out serialized).
class ResponseReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                        public WriteTarget<weft::v1::GenerateResponse> {
 public:
  // `on_cancel` runs (once) when the client cancels or the call breaks before Finish.
  // `on_end` runs just before the call's status goes to the client (Finish) and again
  // at OnDone (so it must be idempotent); gRPC deletes the reactor, with what the
  // callbacks hold, after OnDone. `context` (may be null: calls that are finished at
  // once) lets Outbox::Abort cancel the call in the transport. `rewrite` (optional) is
  // applied to a copy of each response before it is sent (an API's own view of the
  // engine's responses, e.g. the gRPC API's tool calls), one write at a time. It is a
  // constructor argument because the outbox may write as soon as it is attached, here.
  using Rewrite = std::function<void(weft::v1::GenerateResponse*)>;
  ResponseReactor(std::shared_ptr<Outbox> outbox, std::function<void()> on_cancel,
                  std::function<void()> on_end, grpc::CallbackServerContext* context = nullptr,
                  Rewrite rewrite = nullptr);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  // WriteTarget. Only the outbox calls these, one write at a time, so buffer_ needs no
  // lock: it stays untouched until the next WriteMessage.
  void WriteMessage(const weft::v1::GenerateResponse* response) override;
  void FinishCall(const absl::Status& status) override;
  void CancelCall(const absl::Status& status) override;

 private:
  std::shared_ptr<Outbox> outbox_;
  grpc::CallbackServerContext* const context_;
  std::function<void()> on_cancel_;
  std::function<void()> on_end_;
  std::atomic<bool> cancelled_{false};
  grpc::ByteBuffer buffer_;  // the serialized response in flight
  const Rewrite rewrite_;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_RESPONSE_STREAM_H_

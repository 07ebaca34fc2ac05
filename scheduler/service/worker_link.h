// WorkerLink: the scheduler's end of one worker's Attach stream (a bidi reactor).
//
// Reads WorkerMessages and hands each to a callback (which only enqueues for the
// planning thread); writes the messages queued by the planning thread in order, one at a
// time (WriteQueue, as a Generate stream does). Messages travel pre-serialized: a plan is
// encoded once (WorkerHandle::Encode) and the same bytes go to every rank of its
// replica. When the stream breaks or ends, the `on_gone` callback runs once.
//
// Ownership: gRPC owns the reactor until OnDone; the planning thread holds a
// shared_ptr<WorkerHandle> that stays valid after the call ends (sends become no-ops).
// Thread-safety: WorkerHandle methods are thread-safe.
#ifndef WEFT_SCHEDULER_SERVICE_WORKER_LINK_H_
#define WEFT_SCHEDULER_SERVICE_WORKER_LINK_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"
#include "scheduler/service/write_queue.h"
#include "weft/v1/worker.pb.h"

namespace weft {

// One worker's stream as the planning thread sees it: its queue of encoded messages
// (the reactor side of WriteQueue is driven by WorkerReactor, or by a test's fake).
class WorkerHandle : public WriteQueue<grpc::ByteBuffer> {
 public:
  WorkerHandle(int64_t id, std::string peer)
      : WriteQueue(Options()), id_(id), peer_(std::move(peer)) {}

  int64_t id() const { return id_; }
  const std::string& peer() const { return peer_; }

  // `message` serialized, to be sent to one worker or several (copies share the bytes).
  static grpc::ByteBuffer Encode(const weft::v1::SchedulerMessage& message);

  // Queues a message for the worker; false when the stream is gone or closing.
  bool Send(const grpc::ByteBuffer& encoded) { return Push(encoded); }
  bool Send(const weft::v1::SchedulerMessage& message) { return Send(Encode(message)); }
  // Ends the stream with `status` after the messages queued before.
  void Close(const absl::Status& status) { Finish(status); }
  bool Gone() const { return Closed(); }

 private:
  const int64_t id_;
  const std::string peer_;
};

// The raw (pre-serialized) Attach method's reactor: WorkerMessages are parsed here,
// SchedulerMessages arrive encoded.
class WorkerReactor : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                      public WriteTarget<grpc::ByteBuffer> {
 public:
  using MessageFn = std::function<void(const std::shared_ptr<WorkerHandle>&,
                                       weft::v1::WorkerMessage)>;
  using GoneFn = std::function<void(const std::shared_ptr<WorkerHandle>&)>;

  WorkerReactor(std::shared_ptr<WorkerHandle> handle, MessageFn on_message, GoneFn on_gone,
                grpc::CallbackServerContext* context = nullptr);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  // WriteTarget.
  void WriteMessage(const grpc::ByteBuffer* message) override;
  void FinishCall(const absl::Status& status) override;
  void CancelCall(const absl::Status& status) override;

 private:
  void Gone();

  std::shared_ptr<WorkerHandle> handle_;
  MessageFn on_message_;
  GoneFn on_gone_;
  grpc::CallbackServerContext* const context_;
  grpc::ByteBuffer read_;
  std::atomic<bool> gone_reported_{false};
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_WORKER_LINK_H_

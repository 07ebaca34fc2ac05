// WorkerLink: the scheduler's end of one worker's Attach stream (a bidi reactor).
//
// Reads WorkerMessages and hands each to a callback (which only enqueues for the
// planning thread); writes SchedulerMessages queued by the planning thread in order, one
// at a time. When the stream breaks or ends, the `on_gone` callback runs once.
//
// Ownership: gRPC owns the reactor until OnDone; the planning thread holds a
// shared_ptr<WorkerLink::Handle> that stays valid after the call ends (sends become
// no-ops). Thread-safety: Handle methods are thread-safe.
#ifndef WEFT_SCHEDULER_SERVICE_WORKER_LINK_H_
#define WEFT_SCHEDULER_SERVICE_WORKER_LINK_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "grpcpp/grpcpp.h"
#include "weft/v1/worker.pb.h"

namespace weft {

class WorkerReactor;

class WorkerHandle {
 public:
  explicit WorkerHandle(int64_t id, std::string peer) : id_(id), peer_(std::move(peer)) {}

  int64_t id() const { return id_; }
  const std::string& peer() const { return peer_; }

  // Queues a message for the worker; false when the stream is gone.
  bool Send(weft::v1::SchedulerMessage message) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the stream (after queued messages) with `status`.
  void Close(const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  bool Gone() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t queued() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class WorkerReactor;
  void Attach(WorkerReactor* reactor) ABSL_LOCKS_EXCLUDED(mu_);
  void OnWriteDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_);
  void OnCallDone() ABSL_LOCKS_EXCLUDED(mu_);
  void Pump() ABSL_LOCKS_EXCLUDED(mu_);

  const int64_t id_;
  const std::string peer_;
  mutable Mutex mu_;
  WorkerReactor* reactor_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::deque<weft::v1::SchedulerMessage> queue_ ABSL_GUARDED_BY(mu_);
  weft::v1::SchedulerMessage in_flight_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool close_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_started_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status close_status_ ABSL_GUARDED_BY(mu_);
};

class WorkerReactor : public grpc::ServerBidiReactor<weft::v1::WorkerMessage,
                                                     weft::v1::SchedulerMessage> {
 public:
  using MessageFn = std::function<void(const std::shared_ptr<WorkerHandle>&,
                                       weft::v1::WorkerMessage)>;
  using GoneFn = std::function<void(const std::shared_ptr<WorkerHandle>&)>;

  WorkerReactor(std::shared_ptr<WorkerHandle> handle, MessageFn on_message, GoneFn on_gone);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  void Gone();

  std::shared_ptr<WorkerHandle> handle_;
  MessageFn on_message_;
  GoneFn on_gone_;
  weft::v1::WorkerMessage read_;
  bool gone_reported_ = false;  // only touched from reactions, which gRPC serializes
                                // per-kind; guarded by gone_mu_ for safety.
  Mutex gone_mu_;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_WORKER_LINK_H_

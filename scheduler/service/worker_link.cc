#include "scheduler/service/worker_link.h"

#include <utility>

namespace weft {

bool WorkerHandle::Send(weft::v1::SchedulerMessage message) {
  {
    MutexLock lock(&mu_);
    if (done_ || close_requested_) return false;
    queue_.push_back(std::move(message));
  }
  Pump();
  return true;
}

void WorkerHandle::Close(const grpc::Status& status) {
  {
    MutexLock lock(&mu_);
    if (done_ || close_requested_) return;
    close_requested_ = true;
    close_status_ = status;
  }
  Pump();
}

bool WorkerHandle::Gone() const {
  MutexLock lock(&mu_);
  return done_ || close_requested_;
}

size_t WorkerHandle::queued() const {
  MutexLock lock(&mu_);
  return queue_.size();
}

void WorkerHandle::Attach(WorkerReactor* reactor) {
  {
    MutexLock lock(&mu_);
    reactor_ = reactor;
  }
  Pump();
}

void WorkerHandle::OnWriteDone(bool ok) {
  {
    MutexLock lock(&mu_);
    write_in_flight_ = false;
    // A failed write (the stream broke) drops what is queued, but a Close requested
    // meanwhile must still Finish the call: gRPC never ends a reactor (OnDone) that did
    // not, and the server's Shutdown would wait for it forever.
    if (!ok) queue_.clear();
  }
  Pump();
}

void WorkerHandle::OnCallDone() {
  MutexLock lock(&mu_);
  done_ = true;
  reactor_ = nullptr;
  queue_.clear();
}

void WorkerHandle::Pump() {
  WorkerReactor* reactor = nullptr;
  const weft::v1::SchedulerMessage* to_write = nullptr;
  bool finish = false;
  grpc::Status status;
  {
    MutexLock lock(&mu_);
    if (reactor_ == nullptr || done_ || write_in_flight_ || finish_started_) return;
    if (!queue_.empty()) {
      in_flight_ = std::move(queue_.front());
      queue_.pop_front();
      write_in_flight_ = true;
      to_write = &in_flight_;
    } else if (close_requested_) {
      finish_started_ = true;
      finish = true;
      status = close_status_;
    } else {
      return;
    }
    reactor = reactor_;
  }
  if (to_write != nullptr) {
    reactor->StartWrite(to_write);
  } else if (finish) {
    reactor->Finish(status);
  }
}

WorkerReactor::WorkerReactor(std::shared_ptr<WorkerHandle> handle, MessageFn on_message,
                             GoneFn on_gone)
    : handle_(std::move(handle)), on_message_(std::move(on_message)), on_gone_(std::move(on_gone)) {
  handle_->Attach(this);
  StartRead(&read_);
}

void WorkerReactor::OnReadDone(bool ok) {
  if (!ok) {
    // The worker half-closed or the stream broke: the worker is gone either way.
    Gone();
    handle_->Close(grpc::Status::OK);
    return;
  }
  on_message_(handle_, std::move(read_));
  read_.Clear();
  StartRead(&read_);
}

void WorkerReactor::OnWriteDone(bool ok) {
  handle_->OnWriteDone(ok);
  if (!ok) Gone();
}

void WorkerReactor::OnCancel() {
  Gone();
  handle_->Close(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
}

void WorkerReactor::OnDone() {
  handle_->OnCallDone();
  Gone();
  delete this;
}

void WorkerReactor::Gone() {
  {
    MutexLock lock(&gone_mu_);
    if (gone_reported_) return;
    gone_reported_ = true;
  }
  on_gone_(handle_);
}

}  // namespace weft

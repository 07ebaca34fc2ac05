#include "scheduler/service/response_stream.h"

#include <utility>

#include "grpc/grpc.h"
#include "grpcpp/impl/codegen/proto_utils.h"

namespace weft {

// Forwards to the reactor. The gRPC callback protocol keeps the reactor alive while the
// Outbox may call it: a write in flight or a Finish not yet started holds back OnDone.
// Generate is a raw method, so each response is serialized here into buffer_, which
// stays untouched until the next StartWrite (the Outbox has at most one write in
// flight, so no lock is needed).
class ResponseReactor::Writer : public OutboxWriter {
 public:
  explicit Writer(ResponseReactor* reactor) : reactor_(reactor) {}
  void StartWrite(const weft::v1::GenerateResponse* response) override {
    bool own_buffer = false;
    buffer_.Clear();  // the previous write is done with it
    grpc::SerializationTraits<weft::v1::GenerateResponse>::Serialize(*response, &buffer_,
                                                                      &own_buffer);
    reactor_->StartWrite(&buffer_);
  }
  void FinishCall(const grpc::Status& status) override { reactor_->Finish(status); }
  void CancelCall(const grpc::Status& status) override { reactor_->CancelCall(status); }

 private:
  ResponseReactor* const reactor_;
  grpc::ByteBuffer buffer_;  // the serialized response in flight
};

bool Outbox::Push(weft::v1::GenerateResponse response) {
  {
    MutexLock lock(&mu_);
    if (done_ || finish_requested_) return false;
    const size_t size = response.ByteSizeLong();
    if (bytes_ + size > max_bytes_) return false;
    if (queue_.empty() && !write_in_flight_) oldest_unwritten_since_ = absl::Now();
    bytes_ += size;
    queue_.push_back(std::move(response));
  }
  Pump();
  return true;
}

void Outbox::Finish(const grpc::Status& status) {
  {
    MutexLock lock(&mu_);
    if (finish_requested_ || done_) return;
    finish_requested_ = true;
    finish_status_ = status;
    if (!status.ok()) {
      queue_.clear();
      bytes_ = 0;
    }
  }
  Pump();
}

void Outbox::Abort(const grpc::Status& status) {
  std::shared_ptr<OutboxWriter> writer;
  {
    MutexLock lock(&mu_);
    if (done_ || aborted_) return;
    aborted_ = true;
    // Overrides a pending OK finish too: the responses it waited to write are dropped.
    finish_requested_ = true;
    if (!finish_started_) finish_status_ = status;
    queue_.clear();
    bytes_ = 0;
    // Only a write that is in flight can hold the finish back; cancelling makes gRPC
    // complete it (not ok), and OnWriteDone then starts the finish.
    if (write_in_flight_ && !finish_started_ && !cancelling_ && writer_ != nullptr) {
      cancelling_ = true;
      writer = writer_;
    }
  }
  if (writer != nullptr) {
    // The gRPC reactor stays alive: gRPC deletes it only after OnDone, which needs the
    // Finish that Pump holds back while cancelling_ is set.
    writer->CancelCall(status);
    MutexLock lock(&mu_);
    cancelling_ = false;
  }
  Pump();
}

bool Outbox::Stalled(absl::Time now, absl::Duration timeout) const {
  MutexLock lock(&mu_);
  if (done_) return false;
  if (queue_.empty() && !write_in_flight_) return false;
  return now - oldest_unwritten_since_ > timeout;
}

bool Outbox::Done() const {
  MutexLock lock(&mu_);
  return done_;
}

bool Outbox::Closed() const {
  MutexLock lock(&mu_);
  return done_ || finish_requested_;
}

size_t Outbox::queued_bytes() const {
  MutexLock lock(&mu_);
  return bytes_;
}

void Outbox::Attach(std::shared_ptr<OutboxWriter> writer) {
  {
    MutexLock lock(&mu_);
    writer_ = std::move(writer);
  }
  Pump();
}

void Outbox::OnWriteDone(bool ok) {
  {
    MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!ok) {
      // The call is broken: drop what is queued. OnCancel may already have asked for
      // the finish while this write was in flight, so fall through to Pump(), which
      // starts it (a broken call must still be finished, or the server never shuts down).
      queue_.clear();
      bytes_ = 0;
    } else {
      oldest_unwritten_since_ = queue_.empty() ? absl::InfiniteFuture() : absl::Now();
    }
  }
  Pump();
}

void Outbox::OnCallDone() {
  std::shared_ptr<OutboxWriter> writer;  // released outside mu_
  MutexLock lock(&mu_);
  done_ = true;
  writer = std::move(writer_);
  queue_.clear();
  bytes_ = 0;
}

void Outbox::Pump() {
  std::shared_ptr<OutboxWriter> writer;
  const weft::v1::GenerateResponse* to_write = nullptr;
  bool finish = false;
  grpc::Status status;
  {
    MutexLock lock(&mu_);
    if (writer_ == nullptr || done_ || write_in_flight_ || finish_started_) return;
    if (!queue_.empty()) {
      in_flight_ = std::move(queue_.front());
      queue_.pop_front();
      bytes_ -= std::min(bytes_, in_flight_.ByteSizeLong());
      write_in_flight_ = true;
      to_write = &in_flight_;
    } else if (finish_requested_) {
      if (cancelling_) return;  // Abort calls Pump again when it is done
      finish_started_ = true;
      finish = true;
      status = finish_status_;
    } else {
      return;
    }
    writer = writer_;
  }
  // No lock held across the writer's call. in_flight_ is not touched again until
  // OnWriteDone clears write_in_flight_.
  if (to_write != nullptr) {
    writer->StartWrite(to_write);
  } else if (finish) {
    writer->FinishCall(status);
  }
}

ResponseReactor::ResponseReactor(std::shared_ptr<Outbox> outbox, std::function<void()> on_cancel,
                                 std::function<void()> on_done,
                                 grpc::CallbackServerContext* context)
    : outbox_(std::move(outbox)),
      context_(context),
      on_cancel_(std::move(on_cancel)),
      on_done_(std::move(on_done)) {
  outbox_->Attach(std::make_shared<Writer>(this));
}

void ResponseReactor::CancelCall(const grpc::Status& status) {
  if (context_ == nullptr) return;
  grpc_call_cancel_with_status(context_->c_call(),
                               static_cast<grpc_status_code>(status.error_code()),
                               status.error_message().c_str(), nullptr);
}

void ResponseReactor::OnWriteDone(bool ok) { outbox_->OnWriteDone(ok); }

void ResponseReactor::OnCancel() {
  if (!cancelled_.exchange(true) && on_cancel_) on_cancel_();
  // A cancelled call must still be finished by the server.
  outbox_->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
}

void ResponseReactor::OnDone() {
  outbox_->OnCallDone();
  if (on_done_) on_done_();
  delete this;
}

}  // namespace weft

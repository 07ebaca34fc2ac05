#include "scheduler/service/write_queue.h"

#include <algorithm>
#include <utility>

#include "grpc/grpc.h"

namespace weft {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

void CancelServerCall(grpc::CallbackServerContext* context, const absl::Status& status) {
  if (context == nullptr) return;
  const std::string message(status.message());
  grpc_call_cancel_with_status(context->c_call(), static_cast<grpc_status_code>(status.code()),
                               message.c_str(), nullptr);
}

bool Coalesce(weft::v1::GenerateResponse* into, weft::v1::GenerateResponse* next) {
  if (into->index() != next->index()) return false;
  if (into->finish_reason() != weft::v1::FINISH_REASON_UNSPECIFIED || into->has_usage()) {
    return false;  // `into` ends its sample: nothing of it may follow
  }
  if (next->has_seed() || !next->request_id().empty()) return false;  // starts a stream
  // Logprobs are one per token when asked for: both carry them or neither does.
  if ((into->logprobs_size() > 0) != (next->logprobs_size() > 0) &&
      into->token_ids_size() > 0 && next->token_ids_size() > 0) {
    return false;
  }
  into->mutable_token_ids()->MergeFrom(next->token_ids());
  into->mutable_text()->append(next->text());
  for (weft::v1::Logprobs& l : *next->mutable_logprobs()) {
    *into->add_logprobs() = std::move(l);
  }
  into->set_finish_reason(next->finish_reason());
  if (next->has_usage()) *into->mutable_usage() = std::move(*next->mutable_usage());
  return true;
}

template <typename Message>
bool WriteQueue<Message>::Push(Message message) {
  {
    MutexLock lock(&mu_);
    if (done_ || finish_requested_) return false;
    const size_t size = WireBytes(message);
    if (bytes_ + size > options_.max_bytes) return false;
    if (options_.coalesce && write_in_flight_ && !queue_.empty()) {
      Message& last = queue_.back();
      const size_t last_size = WireBytes(last);
      if (Coalesce(&last, &message)) {
        bytes_ = bytes_ - std::min(bytes_, last_size) + WireBytes(last);
        ++coalesced_;
        return true;  // the write in flight pumps the merged message when it completes
      }
    }
    if (queue_.empty() && !write_in_flight_) oldest_unwritten_since_ = absl::Now();
    bytes_ += size;
    queue_.push_back(std::move(message));
  }
  Pump();
  return true;
}

template <typename Message>
void WriteQueue<Message>::Finish(const absl::Status& status) {
  {
    MutexLock lock(&mu_);
    if (finish_requested_ || done_) return;
    finish_requested_ = true;
    finish_status_ = status;
    if (!status.ok() && options_.error_drops_queued) DropQueued();
  }
  Pump();
}

template <typename Message>
void WriteQueue<Message>::Abort(const absl::Status& status) {
  std::shared_ptr<WriteTarget<Message>> target;
  {
    MutexLock lock(&mu_);
    if (done_ || aborted_) return;
    aborted_ = true;
    // Overrides a pending OK finish too: the messages it waited to write are dropped.
    finish_requested_ = true;
    if (!finish_started_) finish_status_ = status;
    DropQueued();
    // Only a write that is in flight can hold the finish back; cancelling makes gRPC
    // complete it (not ok), and OnWriteDone then starts the finish.
    if (write_in_flight_ && !finish_started_ && !cancelling_ && target_ != nullptr) {
      cancelling_ = true;
      target = target_;
    }
  }
  if (target != nullptr) {
    // The target stays alive: the queue holds it, and gRPC ends no reactor while its
    // write is pending and the finish is held back (cancelling_).
    target->CancelCall(status);
    MutexLock lock(&mu_);
    cancelling_ = false;
  }
  Pump();
}

template <typename Message>
bool WriteQueue<Message>::Stalled(absl::Time now, absl::Duration timeout) const {
  MutexLock lock(&mu_);
  if (done_) return false;
  if (queue_.empty() && !write_in_flight_) return false;
  return now - oldest_unwritten_since_ > timeout;
}

template <typename Message>
bool WriteQueue<Message>::Closed() const {
  MutexLock lock(&mu_);
  return done_ || finish_requested_;
}

template <typename Message>
bool WriteQueue<Message>::Done() const {
  MutexLock lock(&mu_);
  return done_;
}

template <typename Message>
size_t WriteQueue<Message>::queued_bytes() const {
  MutexLock lock(&mu_);
  return bytes_;
}

template <typename Message>
uint64_t WriteQueue<Message>::coalesced() const {
  MutexLock lock(&mu_);
  return coalesced_;
}

template <typename Message>
void WriteQueue<Message>::Attach(std::shared_ptr<WriteTarget<Message>> target) {
  {
    MutexLock lock(&mu_);
    target_ = std::move(target);
  }
  Pump();
}

template <typename Message>
void WriteQueue<Message>::OnWriteDone(bool ok) {
  {
    MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!ok) {
      // The call is broken: drop what is queued, then fall through to Pump(), which
      // starts the finish if it was asked for while this write was in flight (a cancel
      // does); a call that is never finished never ends.
      DropQueued();
    } else {
      oldest_unwritten_since_ = queue_.empty() ? absl::InfiniteFuture() : absl::Now();
    }
  }
  Pump();
}

template <typename Message>
void WriteQueue<Message>::OnCallDone() {
  std::shared_ptr<WriteTarget<Message>> target;  // released outside mu_
  MutexLock lock(&mu_);
  done_ = true;
  target = std::move(target_);
  DropQueued();
}

template <typename Message>
void WriteQueue<Message>::DropQueued() {
  queue_.clear();
  bytes_ = 0;
}

template <typename Message>
void WriteQueue<Message>::Pump() {
  std::shared_ptr<WriteTarget<Message>> target;
  const Message* to_write = nullptr;
  absl::Status status;
  {
    MutexLock lock(&mu_);
    if (target_ == nullptr || done_ || write_in_flight_ || finish_started_) return;
    if (!queue_.empty()) {
      in_flight_ = std::move(queue_.front());
      queue_.pop_front();
      bytes_ -= std::min(bytes_, WireBytes(in_flight_));
      write_in_flight_ = true;
      to_write = &in_flight_;
    } else if (finish_requested_) {
      if (cancelling_) return;  // Abort calls Pump again when it is done
      finish_started_ = true;
      status = finish_status_;
    } else {
      return;
    }
    target = target_;
  }
  // No lock held across the call. in_flight_ is not touched again until OnWriteDone
  // clears write_in_flight_.
  if (to_write != nullptr) {
    target->WriteMessage(to_write);
  } else {
    target->FinishCall(status);
  }
}

template class WriteQueue<weft::v1::GenerateResponse>;
template class WriteQueue<grpc::ByteBuffer>;
template class WriteQueue<grpc::health::v1::HealthCheckResponse>;

}  // namespace weft

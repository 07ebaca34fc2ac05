#include "scheduler/service/worker_link.h"

#include <utility>

#include "grpcpp/impl/codegen/proto_utils.h"

namespace weft {

grpc::ByteBuffer WorkerHandle::Encode(const weft::v1::SchedulerMessage& message) {
  grpc::ByteBuffer bytes;
  bool own = false;
  const grpc::Status s =
      grpc::SerializationTraits<weft::v1::SchedulerMessage>::Serialize(message, &bytes, &own);
  // Serializing a message in memory fails only when it is over 2 GiB.
  if (!s.ok()) bytes.Clear();
  return bytes;
}

WorkerReactor::WorkerReactor(std::shared_ptr<WorkerHandle> handle, MessageFn on_message,
                             GoneFn on_gone, grpc::CallbackServerContext* context)
    : handle_(std::move(handle)),
      on_message_(std::move(on_message)),
      on_gone_(std::move(on_gone)),
      context_(context) {
  handle_->Attach(NotOwned<grpc::ByteBuffer>(this));
  StartRead(&read_);
}

void WorkerReactor::OnReadDone(bool ok) {
  weft::v1::WorkerMessage message;
  const bool parsed =
      ok && grpc::SerializationTraits<weft::v1::WorkerMessage>::Deserialize(&read_, &message).ok();
  if (!parsed) {
    // The worker half-closed, the stream broke, or it sent bytes that are not a
    // WorkerMessage: the worker is gone either way.
    Gone();
    handle_->Close(ok ? absl::InvalidArgumentError("not a WorkerMessage") : absl::OkStatus());
    return;
  }
  on_message_(handle_, std::move(message));
  StartRead(&read_);
}

void WorkerReactor::OnWriteDone(bool ok) {
  handle_->OnWriteDone(ok);
  if (!ok) Gone();
}

void WorkerReactor::OnCancel() {
  Gone();
  handle_->Close(absl::CancelledError("cancelled"));
}

void WorkerReactor::OnDone() {
  handle_->OnCallDone();
  Gone();
  delete this;
}

void WorkerReactor::WriteMessage(const grpc::ByteBuffer* message) { StartWrite(message); }

void WorkerReactor::FinishCall(const absl::Status& status) { Finish(ToGrpcStatus(status)); }

void WorkerReactor::CancelCall(const absl::Status& status) { CancelServerCall(context_, status); }

void WorkerReactor::Gone() {
  if (!gone_reported_.exchange(true)) on_gone_(handle_);
}

}  // namespace weft

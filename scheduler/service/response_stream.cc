#include "scheduler/service/response_stream.h"

#include <utility>

#include "grpcpp/impl/codegen/proto_utils.h"

namespace weft {

ResponseReactor::ResponseReactor(std::shared_ptr<Outbox> outbox, std::function<void()> on_cancel,
                                 std::function<void()> on_end,
                                 grpc::CallbackServerContext* context, Rewrite rewrite)
    : outbox_(std::move(outbox)),
      context_(context),
      on_cancel_(std::move(on_cancel)),
      on_end_(std::move(on_end)),
      rewrite_(std::move(rewrite)) {
  outbox_->Attach(NotOwned<weft::v1::GenerateResponse>(this));
}

void ResponseReactor::WriteMessage(const weft::v1::GenerateResponse* response) {
  bool own_buffer = false;
  buffer_.Clear();  // the previous write is done with it
  if (rewrite_) {
    weft::v1::GenerateResponse copy = *response;
    rewrite_(&copy);
    grpc::SerializationTraits<weft::v1::GenerateResponse>::Serialize(copy, &buffer_, &own_buffer);
  } else {
    grpc::SerializationTraits<weft::v1::GenerateResponse>::Serialize(*response, &buffer_,
                                                                      &own_buffer);
  }
  StartWrite(&buffer_);
}

void ResponseReactor::FinishCall(const absl::Status& status) {
  if (on_end_) on_end_();
  Finish(ToGrpcStatus(status));
}

void ResponseReactor::CancelCall(const absl::Status& status) { CancelServerCall(context_, status); }

void ResponseReactor::OnWriteDone(bool ok) { outbox_->OnWriteDone(ok); }

void ResponseReactor::OnCancel() {
  if (!cancelled_.exchange(true) && on_cancel_) on_cancel_();
  // A cancelled call must still be finished by the server.
  outbox_->Finish(absl::CancelledError("cancelled"));
}

void ResponseReactor::OnDone() {
  outbox_->OnCallDone();
  if (on_end_) on_end_();
  delete this;
}

}  // namespace weft

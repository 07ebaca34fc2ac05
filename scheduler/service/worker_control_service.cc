#include "scheduler/service/worker_control_service.h"

#include <memory>

#include "glog/logging.h"

namespace weft {

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* WorkerControlService::Attach(
    grpc::CallbackServerContext* context) {
  auto handle = std::make_shared<WorkerHandle>(next_id_.fetch_add(1), context->peer());
  LOG(INFO) << "worker stream " << handle->id() << " from " << handle->peer();
  return new WorkerReactor(
      handle,
      [this](const std::shared_ptr<WorkerHandle>& h, weft::v1::WorkerMessage m) {
        engine_->OnWorkerMessage(h, std::move(m));
      },
      [this](const std::shared_ptr<WorkerHandle>& h) { engine_->OnWorkerGone(h); }, context);
}

}  // namespace weft

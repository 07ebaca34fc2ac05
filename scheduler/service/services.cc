#include "scheduler/service/services.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace weft {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

grpc::ServerWriteReactor<weft::v1::GenerateResponse>* GenerationService::Reject(
    const grpc::Status& status) {
  auto outbox = std::make_shared<Outbox>(1024);
  auto* reactor = new ResponseReactor(outbox, nullptr, nullptr);
  outbox->Finish(status);
  return reactor;
}

grpc::ServerWriteReactor<weft::v1::GenerateResponse>* GenerationService::Generate(
    grpc::CallbackServerContext* context, const weft::v1::GenerateRequest* request) {
  const absl::Time arrival = absl::Now();
  absl::Time deadline = absl::InfiniteFuture();
  const auto dl = context->deadline();
  if (dl != std::chrono::system_clock::time_point::max()) deadline = absl::FromChrono(dl);
  auto started = frontend_->Start(*request, arrival, deadline);
  if (!started.ok()) return Reject(ToGrpcStatus(started.status()));
  // The reactor's callbacks share the call; gRPC deletes the reactor (and so gives the
  // slot back) after OnDone.
  std::shared_ptr<GenerateFrontend::Call> call = std::move(*started);
  return new ResponseReactor(
      call->outbox(), [call] { call->Cancel(); }, [call] {}, context);
}

grpc::ServerUnaryReactor* GenerationService::ListModels(grpc::CallbackServerContext* context,
                                                        const weft::v1::ListModelsRequest*,
                                                        weft::v1::ListModelsResponse* response) {
  *response->add_models() = frontend_->ModelInfo();
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerBidiReactor<weft::v1::WorkerMessage, weft::v1::SchedulerMessage>*
WorkerControlService::Attach(grpc::CallbackServerContext* context) {
  auto handle = std::make_shared<WorkerHandle>(next_id_.fetch_add(1), context->peer());
  LOG(INFO) << "worker stream " << handle->id() << " from " << handle->peer();
  return new WorkerReactor(
      handle,
      [this](const std::shared_ptr<WorkerHandle>& h, weft::v1::WorkerMessage m) {
        engine_->OnWorkerMessage(h, std::move(m));
      },
      [this](const std::shared_ptr<WorkerHandle>& h) { engine_->OnWorkerGone(h); });
}

}  // namespace weft

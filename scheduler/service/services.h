// The scheduler's gRPC services: the public Generation service and the internal
// WorkerControl (Attach) service. Both are thin: Generation hands each request to the
// GenerateFrontend (limits, validation, submission; shared with the OpenAI HTTP API)
// and streams the call's outbox; the planning thread does everything else.
// Thread-safety: gRPC calls these from its threads; state is atomics + the engine.
#ifndef WEFT_SCHEDULER_SERVICE_SERVICES_H_
#define WEFT_SCHEDULER_SERVICE_SERVICES_H_

#include <atomic>
#include <memory>

#include "scheduler/service/engine_interface.h"
#include "scheduler/service/generate_frontend.h"
#include "weft/v1/generate.grpc.pb.h"
#include "weft/v1/worker.grpc.pb.h"

namespace weft {

class GenerationService final : public weft::v1::Generation::CallbackService {
 public:
  // `frontend` outlives the service.
  explicit GenerationService(GenerateFrontend* frontend) : frontend_(frontend) {}

  grpc::ServerWriteReactor<weft::v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const weft::v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const weft::v1::ListModelsRequest* request,
                                       weft::v1::ListModelsResponse* response) override;

  // Generation calls open over every API (the limit is shared).
  int open_streams() const { return frontend_->open_streams(); }

 private:
  // A reactor that ends the call at once with `status` (already counted).
  grpc::ServerWriteReactor<weft::v1::GenerateResponse>* Reject(const grpc::Status& status);

  GenerateFrontend* const frontend_;
};

class WorkerControlService final : public weft::v1::WorkerControl::CallbackService {
 public:
  explicit WorkerControlService(EngineInterface* engine) : engine_(engine) {}

  grpc::ServerBidiReactor<weft::v1::WorkerMessage, weft::v1::SchedulerMessage>* Attach(
      grpc::CallbackServerContext* context) override;

 private:
  EngineInterface* const engine_;
  std::atomic<int64_t> next_id_{1};
};

// Status helpers: absl -> grpc, in exactly one place.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_SERVICES_H_

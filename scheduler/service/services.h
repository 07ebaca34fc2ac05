// The scheduler's gRPC services: the public Generation service and the internal
// WorkerControl (Attach) service. Both are thin: they validate, count and enqueue into
// the engine; the planning thread does everything else.
// Thread-safety: gRPC calls these from its threads; state is atomics + the engine.
#ifndef WEFT_SCHEDULER_SERVICE_SERVICES_H_
#define WEFT_SCHEDULER_SERVICE_SERVICES_H_

#include <atomic>
#include <memory>

#include "scheduler/service/engine_interface.h"
#include "scheduler/service/metrics.h"
#include "scheduler/service/validation.h"
#include "weft/v1/generate.grpc.pb.h"
#include "weft/v1/worker.grpc.pb.h"

namespace weft {

struct GenerationServiceOptions {
  int max_streams = 1024;               // open Generate calls; more get RESOURCE_EXHAUSTED
  size_t stream_buffer_bytes = 4 << 20; // per-stream outbox cap
};

class GenerationService final : public weft::v1::Generation::CallbackService {
 public:
  GenerationService(GenerationServiceOptions options, ValidationLimits limits,
                    const PromptEncoder* encoder, EngineInterface* engine,
                    ServiceMetrics* metrics);

  grpc::ServerWriteReactor<weft::v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const weft::v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const weft::v1::ListModelsRequest* request,
                                       weft::v1::ListModelsResponse* response) override;

  int open_streams() const { return open_streams_.load(); }

 private:
  // A reactor that ends the call at once with `status`.
  grpc::ServerWriteReactor<weft::v1::GenerateResponse>* Reject(const grpc::Status& status);
  uint64_t NextSeed();

  const GenerationServiceOptions options_;
  const ValidationLimits limits_;
  const PromptEncoder* const encoder_;
  EngineInterface* const engine_;
  ServiceMetrics* const metrics_;
  std::atomic<int> open_streams_{0};
  std::atomic<int64_t> next_key_{1};
  std::atomic<uint64_t> seed_state_;
};

// Attach is a raw method (the wire bytes are WorkerMessage / SchedulerMessage): plans are
// serialized once for all ranks of a replica (WorkerLink).
class WorkerControlService final
    : public weft::v1::WorkerControl::WithRawCallbackMethod_Attach<
          weft::v1::WorkerControl::Service> {
 public:
  explicit WorkerControlService(EngineInterface* engine) : engine_(engine) {}

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Attach(
      grpc::CallbackServerContext* context) override;

 private:
  EngineInterface* const engine_;
  std::atomic<int64_t> next_id_{1};
};

// Status helpers: absl -> grpc, in exactly one place.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_SERVICES_H_

// The scheduler's gRPC services: the public Generation service and the internal
// WorkerControl (Attach) service. Both are thin: they validate, count and enqueue into
// the engine; the planning thread does everything else.
//
// Generation, in the order a call meets them: the bearer token (when options.auth is
// set: UNAUTHENTICATED before anything else is looked at), the model it names in the
// request and/or the x-weft-model metadata (CheckRequestedModel), the stream cap, then
// the request itself. Generate is registered raw and parsed by hand (request_parse.h),
// so a request that does not parse is INVALID_ARGUMENT naming the field. Health and
// reflection are separate services and need no token (probes and load balancers).
// Thread-safety: gRPC calls these from its threads; state is atomics + the engine.
#ifndef WEFT_SCHEDULER_SERVICE_SERVICES_H_
#define WEFT_SCHEDULER_SERVICE_SERVICES_H_

#include <atomic>
#include <memory>

#include "scheduler/service/bearer_tokens.h"
#include "scheduler/service/engine_interface.h"
#include "scheduler/service/metrics.h"
#include "scheduler/service/validation.h"
#include "weft/v1/generate.grpc.pb.h"
#include "weft/v1/worker.grpc.pb.h"

namespace weft {

struct GenerationServiceOptions {
  int max_streams = 1024;               // open Generate calls; more get RESOURCE_EXHAUSTED
  size_t stream_buffer_bytes = 4 << 20; // per-stream outbox cap
  const BearerTokens* auth = nullptr;   // not owned; null: no token needed
};

class GenerationService final
    : public weft::v1::Generation::WithRawCallbackMethod_Generate<
          weft::v1::Generation::CallbackService> {
 public:
  GenerationService(GenerationServiceOptions options, ValidationLimits limits,
                    const PromptEncoder* encoder, EngineInterface* engine,
                    ServiceMetrics* metrics);

  // Raw: the request's bytes (see request_parse.h); responses are GenerateResponse.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const weft::v1::ListModelsRequest* request,
                                       weft::v1::ListModelsResponse* response) override;

  int open_streams() const { return open_streams_.load(); }

 private:
  // A reactor that ends the call at once with `status`.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Reject(const grpc::Status& status);
  // The bearer token (when auth is on).
  absl::Status CheckToken(const grpc::CallbackServerContext& context) const;
  // The model the request's `field` and the x-weft-model metadata name.
  absl::Status CheckModel(const grpc::CallbackServerContext& context,
                          absl::string_view field) const;
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

// The single value of metadata `key` ("" when absent); INVALID_ARGUMENT when it is given
// more than once.
absl::StatusOr<std::string> SingleMetadata(const grpc::CallbackServerContext& context,
                                           absl::string_view key);

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_SERVICES_H_

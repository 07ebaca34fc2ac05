// GenerationService: the public weft.v1.Generation gRPC service, thin over the
// GenerateFrontend (generate_frontend.h, shared with the OpenAI HTTP API): the bearer
// token first (before the request is parsed), then Generate's request parsed by hand
// (registered raw: request_parse.h names the field of a request that does not parse), the
// model (request field and/or x-weft-model metadata), and GenerateFrontend::Start; the
// call's outbox is streamed back. Health and reflection need no token.
// Thread-safety: gRPC calls these from its threads; state is atomics + the engine.
#ifndef WEFT_SCHEDULER_EDGE_GENERATION_SERVICE_H_
#define WEFT_SCHEDULER_EDGE_GENERATION_SERVICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "scheduler/edge/generate_frontend.h"
#include "weft/v1/generate.grpc.pb.h"

namespace weft {

class GenerationService final
    : public weft::v1::Generation::WithRawCallbackMethod_Generate<
          weft::v1::Generation::CallbackService> {
 public:
  // `frontend` outlives the service.
  explicit GenerationService(GenerateFrontend* frontend) : frontend_(frontend) {}

  // Raw: the request's bytes (see request_parse.h); responses are GenerateResponse.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const weft::v1::ListModelsRequest* request,
                                       weft::v1::ListModelsResponse* response) override;

  // Generation calls open over every API (the limit is shared).
  int open_streams() const { return frontend_->open_streams(); }

 private:
  // A reactor that ends the call at once with `status` (already counted).
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Reject(const absl::Status& status);
  // The bearer token from the authorization metadata.
  absl::Status CheckToken(const grpc::CallbackServerContext& context) const;

  GenerateFrontend* const frontend_;
};

// The single value of metadata `key` ("" when absent); INVALID_ARGUMENT when it is given
// more than once.
absl::StatusOr<std::string> SingleMetadata(const grpc::CallbackServerContext& context,
                                           absl::string_view key);

}  // namespace weft

#endif  // WEFT_SCHEDULER_EDGE_GENERATION_SERVICE_H_

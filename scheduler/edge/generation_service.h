// GenerationService: the public weft.v1.Generation gRPC service, thin over the
// GenerateFrontend (generate_frontend.h, shared with the OpenAI HTTP API): the bearer
// token first (before the request is parsed), then Generate's request parsed by hand
// (registered raw: request_parse.h names the field of a request that does not parse), the
// model (request field and/or x-weft-model metadata), and GenerateFrontend::Start; the
// call's outbox is streamed back. Health and reflection need no token. A chat request
// with tool_choice (generate.proto) has its answer read for tool calls on the way out
// (ToolCallResponses: the same parser as the OpenAI API's, in the model's format).
// Thread-safety: gRPC calls these from its threads; state is atomics + the engine.
#ifndef WEFT_SCHEDULER_EDGE_GENERATION_SERVICE_H_
#define WEFT_SCHEDULER_EDGE_GENERATION_SERVICE_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "common/tool_call_format.h"
#include "scheduler/edge/generate_frontend.h"
#include "scheduler/edge/tool_call_parser.h"
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

// One call's responses read for tool calls (ChatPrompt.tool_choice): each sample's text
// through a ToolCallCollector, so `text` keeps what is outside the calls, tool_calls gets
// each call whole once it is closed (ids ToolCallIdPrefix(request_id, index) + ...),
// and a sample that stopped after making calls finishes FINISH_REASON_TOOL_CALLS.
// Thread-compatible: one response at a time (ResponseReactor's rewrite).
class ToolCallResponses {
 public:
  ToolCallResponses(std::string request_id, ToolCallFormat format)
      : request_id_(std::move(request_id)), format_(format) {}
  void Rewrite(weft::v1::GenerateResponse* response);

 private:
  const std::string request_id_;
  const ToolCallFormat format_;
  std::map<int, openai::ToolCallCollector> samples_;
};

// The single value of metadata `key` ("" when absent); INVALID_ARGUMENT when it is given
// more than once.
absl::StatusOr<std::string> SingleMetadata(const grpc::CallbackServerContext& context,
                                           absl::string_view key);

}  // namespace weft

#endif  // WEFT_SCHEDULER_EDGE_GENERATION_SERVICE_H_

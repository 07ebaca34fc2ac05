#include "scheduler/edge/generation_service.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "scheduler/edge/request_parse.h"

namespace weft {

absl::StatusOr<std::string> SingleMetadata(const grpc::CallbackServerContext& context,
                                           absl::string_view key) {
  const auto range =
      context.client_metadata().equal_range(grpc::string_ref(key.data(), key.size()));
  std::string value;
  int n = 0;
  for (auto it = range.first; it != range.second; ++it, ++n) {
    value.assign(it->second.data(), it->second.size());
  }
  if (n > 1) return absl::InvalidArgumentError(absl::StrCat(key, " metadata given ", n, " times"));
  return value;
}

absl::Status GenerationService::CheckToken(const grpc::CallbackServerContext& context) const {
  if (!frontend_->auth_required()) return absl::OkStatus();
  absl::StatusOr<std::string> authorization = SingleMetadata(context, "authorization");
  if (!authorization.ok()) return absl::UnauthenticatedError(authorization.status().message());
  return frontend_->Authenticate(*authorization);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Reject(
    const absl::Status& status) {
  auto outbox = std::make_shared<Outbox>(1024);
  auto* reactor = new ResponseReactor(outbox, nullptr, nullptr);
  outbox->Finish(status);
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw_request) {
  const absl::Time arrival = absl::Now();
  // Before the request's bytes are even parsed: an unauthenticated caller costs nothing.
  if (absl::Status s = CheckToken(*context); !s.ok()) {
    frontend_->CountRejection(s);
    return Reject(s);
  }
  weft::v1::GenerateRequest request;
  if (absl::Status s = ParseMessage(*raw_request, &request); !s.ok()) {
    frontend_->CountRejection(s);
    return Reject(s);
  }
  CallContext call_context;
  call_context.arrival = arrival;
  absl::StatusOr<std::string> model = SingleMetadata(*context, kModelMetadataKey);
  if (!model.ok()) {
    frontend_->CountRejection(model.status());
    return Reject(model.status());
  }
  call_context.model_header = std::move(*model);
  const auto dl = context->deadline();
  if (dl != std::chrono::system_clock::time_point::max()) {
    call_context.deadline = absl::FromChrono(dl);
  }
  auto started = frontend_->Start(request, call_context);
  if (!started.ok()) return Reject(started.status());
  // The reactor's callbacks share the call; gRPC deletes the reactor (and so gives the
  // slot back) after OnDone.
  std::shared_ptr<GenerateFrontend::Call> call = std::move(*started);
  return new ResponseReactor(
      call->outbox(), [call] { call->Cancel(); }, [call] {}, context);
}

grpc::ServerUnaryReactor* GenerationService::ListModels(grpc::CallbackServerContext* context,
                                                        const weft::v1::ListModelsRequest*,
                                                        weft::v1::ListModelsResponse* response) {
  auto* reactor = context->DefaultReactor();
  absl::Status s = CheckToken(*context);
  if (s.ok()) {
    absl::StatusOr<std::string> model = SingleMetadata(*context, kModelMetadataKey);
    s = model.ok() ? frontend_->CheckModel("", *model) : model.status();
  }
  if (!s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  *response->add_models() = frontend_->ModelInfo();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace weft

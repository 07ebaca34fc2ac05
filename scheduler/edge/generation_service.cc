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
  // The call's id, echoed in the initial metadata whatever the outcome: the client's
  // x-request-id (or, once the request is parsed, its client_request_id), else a new one.
  absl::StatusOr<std::string> given_id = SingleMetadata(*context, kRequestIdMetadataKey);
  std::string request_id = frontend_->RequestId(given_id.ok() ? *given_id : "");
  // Before the request's bytes are even parsed: an unauthenticated caller costs nothing.
  if (absl::Status s = CheckToken(*context); !s.ok()) {
    context->AddInitialMetadata(kRequestIdMetadataKey, request_id);
    frontend_->CountRejection(s, request_id);
    return Reject(s);
  }
  weft::v1::GenerateRequest request;
  absl::Status parsed = ParseMessage(*raw_request, &request);
  if (parsed.ok() && (!given_id.ok() || given_id->empty()) && !request.client_request_id().empty()) {
    request_id = frontend_->RequestId(request.client_request_id());
  }
  context->AddInitialMetadata(kRequestIdMetadataKey, request_id);
  if (!parsed.ok()) {
    frontend_->CountRejection(parsed, request_id);
    return Reject(parsed);
  }
  CallContext call_context;
  call_context.arrival = arrival;
  call_context.request_id = request_id;
  if (absl::StatusOr<std::string> a = SingleMetadata(*context, "authorization"); a.ok()) {
    call_context.authorization = std::move(*a);
  }
  absl::StatusOr<std::string> model = SingleMetadata(*context, kModelMetadataKey);
  if (!model.ok()) {
    frontend_->CountRejection(model.status(), request_id);
    return Reject(model.status());
  }
  call_context.model_header = std::move(*model);
  const auto dl = context->deadline();
  if (dl != std::chrono::system_clock::time_point::max()) {
    call_context.deadline = absl::FromChrono(dl);
  }
  auto started = frontend_->Start(request, call_context);
  if (!started.ok()) return Reject(started.status());
  // The reactor's callbacks share the call: its slots go back as its status is sent.
  std::shared_ptr<GenerateFrontend::Call> call = std::move(*started);
  ResponseReactor::Rewrite rewrite;
  if (ReadsToolCalls(request)) {
    auto calls = std::make_shared<ToolCallResponses>(request_id, frontend_->tool_call_format());
    rewrite = [calls](weft::v1::GenerateResponse* r) { calls->Rewrite(r); };
  }
  return new ResponseReactor(
      call->outbox(), [call] { call->Cancel(); }, [call] { call->Release(); }, context,
      std::move(rewrite));
}

void ToolCallResponses::Rewrite(weft::v1::GenerateResponse* r) {
  auto it = samples_.find(r->index());
  if (it == samples_.end()) {
    it = samples_
             .emplace(r->index(),
                      openai::ToolCallCollector(openai::ToolCallIdPrefix(request_id_, r->index()),
                                                format_))
             .first;
  }
  openai::ToolCallCollector& c = it->second;
  openai::ParsedOutput out = c.Feed(r->text());
  const bool finished = r->finish_reason() != weft::v1::FINISH_REASON_UNSPECIFIED;
  if (finished) out.Append(c.Finish());
  r->set_text(std::move(out.content));
  for (openai::ToolCallDelta& d : out.calls) {
    weft::v1::ToolCall* call = r->add_tool_calls();
    call->set_id(std::move(d.id));
    call->set_name(std::move(d.name));
    call->set_arguments(std::move(d.arguments));
  }
  if (r->finish_reason() == weft::v1::FINISH_REASON_STOP && c.num_calls() > 0) {
    r->set_finish_reason(weft::v1::FINISH_REASON_TOOL_CALLS);
  }
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

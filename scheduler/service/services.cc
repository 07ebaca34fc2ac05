#include "scheduler/service/services.h"

#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "scheduler/service/request_parse.h"

namespace weft {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

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

namespace {

std::string CodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

}  // namespace

GenerationService::GenerationService(GenerationServiceOptions options, ValidationLimits limits,
                                     const PromptEncoder* encoder, EngineInterface* engine,
                                     ServiceMetrics* metrics)
    : options_(options),
      limits_(std::move(limits)),
      encoder_(encoder),
      engine_(engine),
      metrics_(metrics),
      seed_state_(std::random_device()() ^ (static_cast<uint64_t>(std::random_device()()) << 32)) {}

uint64_t GenerationService::NextSeed() {
  // splitmix64 over an atomic counter: distinct seeds, no lock.
  uint64_t z = seed_state_.fetch_add(0x9e3779b97f4a7c15ull) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

absl::Status GenerationService::CheckToken(const grpc::CallbackServerContext& context) const {
  if (options_.auth == nullptr) return absl::OkStatus();
  absl::StatusOr<std::string> authorization = SingleMetadata(context, "authorization");
  if (!authorization.ok()) return absl::UnauthenticatedError(authorization.status().message());
  return options_.auth->Check(*authorization);
}

absl::Status GenerationService::CheckModel(const grpc::CallbackServerContext& context,
                                           absl::string_view field) const {
  absl::StatusOr<std::string> model = SingleMetadata(context, kModelMetadataKey);
  if (!model.ok()) return model.status();
  return CheckRequestedModel(field, *model, limits_.model_name);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Reject(
    const grpc::Status& status) {
  metrics_->ByStatus(CodeName(status.error_code())).Increment();
  auto outbox = std::make_shared<Outbox>(1024);
  auto* reactor = new ResponseReactor(outbox, nullptr, nullptr);
  outbox->Finish(status);
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw_request) {
  const absl::Time arrival = absl::Now();
  // Before the request's bytes are even parsed: an unauthenticated caller costs nothing.
  if (absl::Status s = CheckToken(*context); !s.ok()) return Reject(ToGrpcStatus(s));
  weft::v1::GenerateRequest parsed;
  if (absl::Status s = ParseMessage(*raw_request, &parsed); !s.ok()) {
    return Reject(ToGrpcStatus(s));
  }
  const weft::v1::GenerateRequest* request = &parsed;
  if (absl::Status s = CheckModel(*context, request->model()); !s.ok()) {
    return Reject(ToGrpcStatus(s));
  }
  if (open_streams_.fetch_add(1) >= options_.max_streams) {
    open_streams_.fetch_sub(1);
    return Reject(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                               absl::StrCat("too many open streams (", options_.max_streams, ")")));
  }
  metrics_->streams_open.Increment();
  auto release = [this] {
    open_streams_.fetch_sub(1);
    metrics_->streams_open.Decrement();
  };
  auto resolved = ValidateRequest(*request, limits_, *encoder_, [this] { return NextSeed(); });
  if (!resolved.ok()) {
    release();
    return Reject(ToGrpcStatus(resolved.status()));
  }
  Submission sub;
  sub.key = next_key_.fetch_add(1);
  sub.request = std::move(*resolved);
  sub.outbox = std::make_shared<Outbox>(options_.stream_buffer_bytes);
  sub.arrival = arrival;
  const auto dl = context->deadline();
  if (dl != std::chrono::system_clock::time_point::max()) sub.deadline = absl::FromChrono(dl);
  const int64_t key = sub.key;
  auto outbox = sub.outbox;
  auto* reactor = new ResponseReactor(
      outbox, [this, key] { engine_->Cancel(key); }, release, context);
  absl::Status s = engine_->Submit(std::move(sub));
  if (!s.ok()) {
    metrics_->ByStatus(absl::StatusCodeToString(s.code())).Increment();
    outbox->Finish(ToGrpcStatus(s));
  }
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::ListModels(grpc::CallbackServerContext* context,
                                                        const weft::v1::ListModelsRequest*,
                                                        weft::v1::ListModelsResponse* response) {
  auto* reactor = context->DefaultReactor();
  absl::Status s = CheckToken(*context);
  if (s.ok()) s = CheckModel(*context, "");
  if (!s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  *response->add_models() = engine_->ModelInfo();
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

#include "scheduler/service/services.h"

#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace weft {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
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

grpc::ServerWriteReactor<weft::v1::GenerateResponse>* GenerationService::Reject(
    const grpc::Status& status) {
  metrics_->ByStatus(CodeName(status.error_code())).Increment();
  auto outbox = std::make_shared<Outbox>(1024);
  auto* reactor = new ResponseReactor(outbox, nullptr, nullptr);
  outbox->Finish(status);
  return reactor;
}

grpc::ServerWriteReactor<weft::v1::GenerateResponse>* GenerationService::Generate(
    grpc::CallbackServerContext* context, const weft::v1::GenerateRequest* request) {
  const absl::Time arrival = absl::Now();
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
  *response->add_models() = engine_->ModelInfo();
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

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

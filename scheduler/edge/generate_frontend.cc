#include "scheduler/edge/generate_frontend.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"

namespace weft {

absl::Status FrontendOptions::Validate() const {
  if (model_name.empty()) return absl::InvalidArgumentError("model_name must be given");
  if (max_prompt_bytes < 1) return absl::InvalidArgumentError("max_prompt_bytes must be >= 1");
  if (max_streams < 1) return absl::InvalidArgumentError("max_streams must be >= 1");
  if (stream_buffer_bytes < 1024) {
    return absl::InvalidArgumentError("stream_buffer_bytes must be >= 1024");
  }
  return absl::OkStatus();
}

GenerateFrontend::Call::~Call() { frontend_->ReleaseSlot(); }

void GenerateFrontend::Call::Cancel() {
  if (!cancelled_.exchange(true)) frontend_->engine_->Cancel(key_);
}

GenerateFrontend::GenerateFrontend(FrontendOptions options, RequestLimits limits,
                                   const PromptEncoder* encoder, EngineInterface* engine,
                                   ServiceMetrics* metrics)
    : options_(options),
      limits_(std::move(limits)),
      encoder_(encoder),
      engine_(engine),
      metrics_(metrics),
      seed_state_(std::random_device()() ^ (static_cast<uint64_t>(std::random_device()()) << 32)) {}

uint64_t GenerateFrontend::NextSeed() {
  // splitmix64 over an atomic counter: distinct seeds, no lock.
  uint64_t z = seed_state_.fetch_add(0x9e3779b97f4a7c15ull) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

bool GenerateFrontend::AcquireSlot() {
  if (open_streams_.fetch_add(1) >= options_.max_streams) {
    open_streams_.fetch_sub(1);
    return false;
  }
  metrics_->streams_open.Increment();
  return true;
}

void GenerateFrontend::ReleaseSlot() {
  open_streams_.fetch_sub(1);
  metrics_->streams_open.Decrement();
}

void GenerateFrontend::CountRejection(const absl::Status& status) {
  metrics_->ByStatus(absl::StatusCodeToString(status.code())).Increment();
}

absl::Status GenerateFrontend::Authenticate(absl::string_view authorization) const {
  if (options_.auth == nullptr) return absl::OkStatus();
  return options_.auth->Check(authorization);
}

absl::Status GenerateFrontend::CheckModel(absl::string_view field, absl::string_view header) const {
  return CheckRequestedModel(field, header, options_.model_name);
}

absl::StatusOr<std::unique_ptr<GenerateFrontend::Call>> GenerateFrontend::Start(
    const weft::v1::GenerateRequest& request, const CallContext& context) {
  if (absl::Status s = CheckModel(request.model(), context.model_header); !s.ok()) {
    CountRejection(s);
    return s;
  }
  if (!AcquireSlot()) {
    absl::Status s = absl::ResourceExhaustedError(
        absl::StrCat("too many open streams (", options_.max_streams, ")"));
    CountRejection(s);
    return s;
  }
  // From here the slot belongs to `call` (released by its destructor on every path).
  Submission sub;
  sub.key = next_key_.fetch_add(1);
  sub.outbox = std::make_shared<Outbox>(options_.stream_buffer_bytes);
  sub.arrival = context.arrival;
  std::unique_ptr<Call> call(new Call(this, sub.key, sub.outbox));
  absl::StatusOr<RequestSpec> spec = BuildSpec(request, limits_, options_.max_prompt_bytes,
                                               *encoder_, [this] { return NextSeed(); });
  if (!spec.ok()) {
    CountRejection(spec.status());
    return spec.status();
  }
  spec->deadline = context.deadline;
  absl::StatusOr<ValidRequest> valid = ValidateRequest(*std::move(spec), limits_);
  if (!valid.ok()) {
    CountRejection(valid.status());
    return valid.status();
  }
  sub.request = std::move(*valid);
  if (absl::Status s = engine_->Submit(std::move(sub)); !s.ok()) {
    CountRejection(s);
    return s;
  }
  return call;
}

}  // namespace weft

#include "scheduler/edge/generate_frontend.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
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

struct GenerateFrontend::TenantState {
  std::atomic<int> open{0};
  Mutex mu;
  double bucket ABSL_GUARDED_BY(mu) = 0;  // tokens available now (may be negative)
  absl::Time refilled ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  // Refills at tokens_per_minute / 60 per second, up to one minute's worth.
  double Refill(int64_t tokens_per_minute, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const double cap = static_cast<double>(tokens_per_minute);
    bucket = refilled == absl::InfinitePast()
                 ? cap
                 : std::min(cap, bucket + cap * absl::ToDoubleSeconds(now - refilled) / 60.0);
    refilled = now;
    return bucket;
  }
};

GenerateFrontend::Call::~Call() { Release(); }

void GenerateFrontend::Call::Release() {
  if (released_.exchange(true)) return;
  if (tenant_) tenant_->open.fetch_sub(1);
  frontend_->ReleaseSlot();
}

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

void GenerateFrontend::CountRejection(const absl::Status& status, const std::string& request_id) {
  metrics_->ByStatus(absl::StatusCodeToString(status.code())).Increment();
  AccessRecord rec;
  rec.who = AccessIdentity{request_id.empty() ? "-" : request_id, "-", options_.model_name};
  rec.code = status.code();
  rec.duration = absl::ZeroDuration();
  LogAccess(rec);
}

std::string GenerateFrontend::RequestId(absl::string_view given) {
  bool ok = !given.empty() && given.size() <= 128;
  for (char c : given) {
    ok = ok && (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
                c == ':' || c == '-');
  }
  if (ok) return std::string(given);
  return absl::StrCat(absl::Hex(NextSeed(), absl::kZeroPad16), absl::Hex(NextSeed(), absl::kZeroPad16));
}

std::shared_ptr<GenerateFrontend::TenantState> GenerateFrontend::StateOf(const std::string& tenant) {
  MutexLock lock(&mu_);
  std::shared_ptr<TenantState>& st = tenants_[tenant];
  if (st == nullptr) st = std::make_shared<TenantState>();
  return st;
}

absl::Status GenerateFrontend::AdmitTenant(const Tenant& tenant,
                                           const weft::v1::GenerateRequest& request,
                                           const std::shared_ptr<TenantState>& state,
                                           absl::Time now) {
  const int32_t max_priority = tenant.max_priority.value_or(options_.default_max_priority);
  if (request.priority() > max_priority) {
    metrics_->TenantRejected(tenant.name, "priority").Increment();
    return absl::PermissionDeniedError(absl::StrCat("priority ", request.priority(),
                                                    " is above this caller's highest, ",
                                                    max_priority));
  }
  if (tenant.tokens_per_minute > 0) {
    MutexLock lock(&state->mu);
    if (state->Refill(tenant.tokens_per_minute, now) <= 0) {
      metrics_->TenantRejected(tenant.name, "tokens_per_minute").Increment();
      return absl::ResourceExhaustedError(absl::StrCat(
          "tenant ", tenant.name, " is over its ", tenant.tokens_per_minute, " tokens per minute"));
    }
  }
  if (state->open.fetch_add(1) >= tenant.max_streams && tenant.max_streams > 0) {
    state->open.fetch_sub(1);
    metrics_->TenantRejected(tenant.name, "streams").Increment();
    return absl::ResourceExhaustedError(
        absl::StrCat("tenant ", tenant.name, " has ", tenant.max_streams, " streams open already"));
  }
  return absl::OkStatus();
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
  const std::string& id = context.request_id;
  if (absl::Status s = CheckModel(request.model(), context.model_header); !s.ok()) {
    CountRejection(s, id);
    return s;
  }
  std::shared_ptr<const Tenant> tenant = std::make_shared<const Tenant>();  // "default"
  if (options_.auth != nullptr) {
    auto resolved = options_.auth->Resolve(context.authorization);
    if (!resolved.ok()) {
      CountRejection(resolved.status(), id);
      return resolved.status();
    }
    tenant = *std::move(resolved);
  }
  std::shared_ptr<TenantState> state = StateOf(tenant->name);
  if (absl::Status s = AdmitTenant(*tenant, request, state, absl::Now()); !s.ok()) {
    CountRejection(s, id);
    return s;
  }
  if (!AcquireSlot()) {
    state->open.fetch_sub(1);
    absl::Status s = absl::ResourceExhaustedError(
        absl::StrCat("too many open streams (", options_.max_streams, ")"));
    CountRejection(s, id);
    return s;
  }
  // From here both slots belong to `call` (released by its destructor on every path).
  Submission sub;
  sub.key = next_key_.fetch_add(1);
  sub.outbox = std::make_shared<Outbox>(options_.stream_buffer_bytes);
  sub.arrival = context.arrival;
  sub.who = AccessIdentity{id.empty() ? "-" : id, tenant->name, options_.model_name};
  std::unique_ptr<Call> call(new Call(this, sub.key, sub.outbox));
  call->tenant_ = state;
  absl::StatusOr<RequestSpec> spec = BuildSpec(request, limits_, options_.max_prompt_bytes,
                                               *encoder_, [this] { return NextSeed(); });
  if (!spec.ok()) {
    CountRejection(spec.status(), id);
    return spec.status();
  }
  spec->deadline = context.deadline;
  absl::StatusOr<ValidRequest> valid = ValidateRequest(*std::move(spec), limits_);
  if (!valid.ok()) {
    CountRejection(valid.status(), id);
    return valid.status();
  }
  double charged = 0;  // tokens per minute: the most the call can use, charged up front
  if (tenant->tokens_per_minute > 0) {
    const RequestSpec& v = valid->spec();
    const int32_t prompt = static_cast<int32_t>(v.prompt_token_ids.size());
    charged = prompt + static_cast<double>(v.stopping.max_tokens) * v.n;
    {
      MutexLock lock(&state->mu);
      state->bucket -= charged;
    }
    // What it did not use comes back when it ends (its access line), whatever ended it.
    sub.who.on_end = [state, charged, prompt,
                      cap = static_cast<double>(tenant->tokens_per_minute)](const AccessRecord& r) {
      const double unused = charged - prompt - r.completion_tokens;
      if (unused <= 0) return;
      MutexLock lock(&state->mu);
      state->bucket = std::min(cap, state->bucket + unused);
    };
  }
  sub.request = std::move(*valid);
  if (absl::Status s = engine_->Submit(std::move(sub)); !s.ok()) {
    if (charged > 0) {
      MutexLock lock(&state->mu);
      state->bucket += charged;  // never started (the line below has no hook)
    }
    CountRejection(s, id);
    return s;
  }
  metrics_->TenantAdmitted(tenant->name).Increment();
  return call;
}

}  // namespace weft

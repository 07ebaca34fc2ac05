// GenerateFrontend: what every public generation API — the gRPC Generation service
// (generation_service.h) and the OpenAI HTTP API (http_server.h) — does with a request
// before the planning thread sees it, written once: the bearer token, the model the call
// names (its request field and/or the x-weft-model header), the open-call limit the two
// APIs share, the request contract (generate_request.h: the core's RequestSpec, built and
// validated against the scheduler's own RequestLimits), seed assignment, call keys,
// submission to the engine and cancellation. Each API only translates its wire format to
// a weft::v1::GenerateRequest and drains the call's Outbox to its client.
//
// In the order a call meets them: Authenticate (before the API even parses the body: an
// unauthenticated caller costs nothing), then Start — the model (CheckRequestedModel),
// the open-call limit, the request contract, the engine's admission. What a later edge
// adds per call belongs here, in Start and CallContext, where both APIs pass: the
// tenant's limits (bearer_tokens.h: max_priority — a higher priority is refused
// PERMISSION_DENIED rather than clamped, so that a client learns at once that it is not
// granted what it asked; max_streams and tokens_per_minute — RESOURCE_EXHAUSTED), all
// checked before the request is tokenized, then its tokens (prompt + max_tokens x n)
// taken from the tenant's per-minute bucket, which refills continuously and may go
// negative (the tenant then waits until it is positive again); the request id; the
// access-log line (access_log.h) of each call refused here.
//
// Every rejection made here (too many calls, a bad request, the engine's admission) is
// counted in weft_requests_status_total by its code; an API that rejects a request
// before it gets here (e.g. a body that does not parse) counts it with
// CountRejection. Requests that are admitted are counted by the engine when they end.
//
// Ownership: borrows the encoder, engine and metrics (they outlive it); a Call owns its
// slot. Thread-safety: thread-safe (atomics and the engine's thread-safe interface).
#ifndef WEFT_SCHEDULER_SERVICE_GENERATE_FRONTEND_H_
#define WEFT_SCHEDULER_SERVICE_GENERATE_FRONTEND_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "scheduler/edge/bearer_tokens.h"
#include "scheduler/edge/generate_request.h"
#include "scheduler/request_spec.h"
#include "scheduler/service/engine_interface.h"
#include "scheduler/service/metrics.h"
#include "scheduler/service/response_stream.h"
#include "weft/v1/generate.pb.h"

namespace weft {

// The request id's gRPC metadata key (HTTP: the X-Request-Id header).
inline constexpr char kRequestIdMetadataKey[] = "x-request-id";

struct FrontendOptions {
  // The served model's name (requests and the x-weft-model header must name it or none).
  std::string model_name;
  // Text or chat prompts over this many bytes are refused before they are tokenized.
  size_t max_prompt_bytes = 1 << 20;
  // Generation calls open at once over both APIs; more get RESOURCE_EXHAUSTED.
  int max_streams = 1024;
  // Per-call outbox cap (the slow-reader guard, response_stream.h).
  size_t stream_buffer_bytes = 4 << 20;
  // The bearer tokens every public API checks (not owned; outlives the frontend).
  // Null: no token needed.
  const BearerTokens* auth = nullptr;
  // The highest priority a caller may ask for when its tenant sets none: callers without
  // a tokens file, and tenants without max_priority=. 0: nobody jumps the queue (or
  // preempts others) unless the tokens file grants it; lower priorities are always
  // allowed.
  int32_t default_max_priority = 0;

  absl::Status Validate() const;
};

// What an API's transport says about one generation call.
struct CallContext {
  // The x-weft-model header (gRPC metadata); "" when absent.
  std::string model_header;
  absl::Time arrival = absl::Now();  // when the call arrived
  absl::Time deadline = absl::InfiniteFuture();
  // The Authorization header's (metadata's) value; the API already authenticated it.
  std::string authorization;
  // From GenerateFrontend::RequestId: the call's id, echoed by the API and logged.
  std::string request_id;
};

class GenerateFrontend {
 public:
  // A tenant's live state: open calls and its tokens-per-minute bucket.
  struct TenantState;

  // One admitted call: the engine has its request and ends it through outbox(). The
  // call holds one of the max_streams slots until it is destroyed; destroy it when
  // the client's call is over (not before: the slot bounds open client calls).
  class Call {
   public:
    ~Call();
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

    int64_t key() const { return key_; }
    const std::shared_ptr<Outbox>& outbox() const { return outbox_; }
    // The client went away: the engine frees the request's blocks within one
    // iteration and counts it cancelled. Idempotent.
    void Cancel();
    // Gives the call's stream slots (the server's and its tenant's) back. Idempotent; the
    // destructor calls it. The APIs call it once the call has ended, before its status
    // (or an HTTP stream's last bytes) reaches the client, so a client that sends its
    // next call as soon as this one ends is never refused for the slot it still held.
    void Release();

   private:
    friend class GenerateFrontend;
    Call(GenerateFrontend* frontend, int64_t key, std::shared_ptr<Outbox> outbox)
        : frontend_(frontend), key_(key), outbox_(std::move(outbox)) {}

    GenerateFrontend* const frontend_;
    const int64_t key_;
    const std::shared_ptr<Outbox> outbox_;
    std::atomic<bool> cancelled_{false};
    std::atomic<bool> released_{false};
    std::shared_ptr<TenantState> tenant_;  // its stream slot is given back with the call's
  };

  // `limits` are the scheduler core's (SchedulerOptions::limits): requests are validated
  // here, once, against the limits the core was built with.
  GenerateFrontend(FrontendOptions options, RequestLimits limits, const PromptEncoder* encoder,
                   EngineInterface* engine, ServiceMetrics* metrics);

  // The caller's bearer token: `authorization` is the Authorization header's (metadata's)
  // value, "" when absent. OK when no tokens are configured, else UNAUTHENTICATED
  // (bearer_tokens.h). Every public endpoint but health calls this before any other
  // work. Not counted here: an API counts a generation call's rejection with
  // CountRejection.
  absl::Status Authenticate(absl::string_view authorization) const;
  bool auth_required() const { return options_.auth != nullptr; }

  // The model a call names in its request (`field`) and/or its x-weft-model header
  // (`header`) against the served one: CheckRequestedModel (INVALID_ARGUMENT when they
  // disagree, NOT_FOUND when it is not served). Not counted.
  absl::Status CheckModel(absl::string_view field, absl::string_view header) const;

  // Checks the model (CheckModel with context.model_header), takes a slot, builds the
  // request's spec (BuildSpec) with the client's deadline, validates it (ValidateRequest)
  // and submits it (arrival and the client's
  // deadline as given). Errors, each counted: the model's INVALID_ARGUMENT / NOT_FOUND,
  // RESOURCE_EXHAUSTED (no slot, queue full), the request contract's INVALID_ARGUMENT
  // (with its field as data) / UNIMPLEMENTED (chat without a template), the engine's
  // UNAVAILABLE.
  absl::StatusOr<std::unique_ptr<Call>> Start(const weft::v1::GenerateRequest& request,
                                              const CallContext& context);

  // Counts a request an API rejected before Start (weft_requests_status_total) and
  // writes its access-log line (`request_id` from RequestId; "" when the API has none).
  void CountRejection(const absl::Status& status, const std::string& request_id = "");

  // The id of a call: the client's (X-Request-Id, x-request-id metadata or the request's
  // client_request_id) when it is 1..128 characters of [A-Za-z0-9._:-], else a new
  // random one (32 hex digits). APIs echo it and the access log names it.
  std::string RequestId(absl::string_view given);

  weft::v1::ModelInfo ModelInfo() const { return engine_->ModelInfo(); }
  const std::string& model_name() const { return options_.model_name; }
  // The served model's tool-call format (PromptEncoder::tool_call_format).
  ToolCallFormat tool_call_format() const { return encoder_->tool_call_format(); }
  int open_streams() const { return open_streams_.load(); }

 private:
  bool AcquireSlot();
  void ReleaseSlot();
  // The tenant limits (max_priority, max_streams, the tokens-per-minute bucket not
  // empty) before any work; takes a tenant slot on OK. PERMISSION_DENIED for a priority
  // above the tenant's, RESOURCE_EXHAUSTED for the others.
  absl::Status AdmitTenant(const Tenant& tenant, const weft::v1::GenerateRequest& request,
                           const std::shared_ptr<TenantState>& state, absl::Time now);
  std::shared_ptr<TenantState> StateOf(const std::string& tenant) ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t NextSeed();

  const FrontendOptions options_;
  const RequestLimits limits_;
  const PromptEncoder* const encoder_;
  EngineInterface* const engine_;
  ServiceMetrics* const metrics_;
  std::atomic<int> open_streams_{0};
  std::atomic<int64_t> next_key_{1};
  std::atomic<uint64_t> seed_state_;
  Mutex mu_;
  // Tenant names come from the tokens file only (or "default"): bounded.
  std::map<std::string, std::shared_ptr<TenantState>> tenants_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_GENERATE_FRONTEND_H_

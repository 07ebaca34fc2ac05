#include "tools/bench/grpc_target.h"

#include <algorithm>
#include <chrono>

#include "absl/synchronization/notification.h"

namespace weft {
namespace bench {
namespace {

absl::Status ToAbsl(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace

// One stream, driven by the poller: start → read ... read (not ok) → finish. It lives on
// the stack of the Run() that waits for `done`; the poller touches it last when it
// notifies.
class GrpcTarget::Call {
 public:
  Call(const RunClock& clock, std::atomic<int64_t>* live_tokens, RequestRecord* record)
      : clock_(clock), live_tokens_(live_tokens), record_(record) {}

  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientAsyncReader<weft::v1::GenerateResponse>> reader;
  absl::Notification done;

  // Called by the poller with each completion of this call's one outstanding operation.
  void Proceed(bool ok) {
    switch (state_) {
      case State::kStarting:
      case State::kReading:
        if (ok) {
          if (state_ == State::kReading) Record();
          state_ = State::kReading;
          reader->Read(&resp_, this);
        } else {
          state_ = State::kFinishing;
          reader->Finish(&status_, this);
        }
        return;
      case State::kFinishing:
        record_->status = ToAbsl(status_);
        record_->end_ns = clock_.NowNs();
        done.Notify();  // the Run() frame may end now: nothing below touches *this
        return;
    }
  }

 private:
  enum class State { kStarting, kReading, kFinishing };

  void Record() {
    const int32_t k = resp_.token_ids_size();
    if (k > 0) {
      record_->AddTokens(clock_.NowNs(), k);
      if (live_tokens_ != nullptr) live_tokens_->fetch_add(k, std::memory_order_relaxed);
    }
    if (resp_.has_usage()) {
      record_->server_output_tokens = resp_.usage().completion_tokens();
      record_->cached_prompt_tokens = resp_.usage().cached_prompt_tokens();
    }
  }

  const RunClock& clock_;
  std::atomic<int64_t>* const live_tokens_;
  RequestRecord* const record_;
  State state_ = State::kStarting;
  weft::v1::GenerateResponse resp_;
  grpc::Status status_;
};

GrpcTarget::GrpcTarget(std::string label, const std::string& address,
                       const RequestOptions& options)
    : Target(std::move(label)), options_(options), address_(address) {
  poller_ = std::thread([this] { Poll(); });
}

int32_t GrpcTarget::connections() const {
  MutexLock l(&mu_);
  return static_cast<int32_t>(connections_.size());
}

GrpcTarget::Connection* GrpcTarget::Acquire() {
  MutexLock l(&mu_);
  Connection* best = nullptr;
  for (const std::unique_ptr<Connection>& c : connections_) {
    if (best == nullptr || c->streams < best->streams) best = c.get();
  }
  if (best == nullptr || best->streams >= std::max(1, options_.grpc_streams_per_connection)) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 64 << 20);
    // A subchannel pool of its own: channels with equal arguments would otherwise share
    // one subchannel, i.e. one TCP connection.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto c = std::make_unique<Connection>();
    c->stub = weft::v1::Generation::NewStub(
        grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), args));
    best = c.get();
    connections_.push_back(std::move(c));
  }
  ++best->streams;
  return best;
}

void GrpcTarget::Release(Connection* c) {
  MutexLock l(&mu_);
  --c->streams;
}

GrpcTarget::~GrpcTarget() {
  cq_.Shutdown();
  poller_.join();
}

void GrpcTarget::Poll() {
  void* tag;
  bool ok;
  while (cq_.Next(&tag, &ok)) static_cast<Call*>(tag)->Proceed(ok);
}

weft::v1::GenerateRequest GrpcTarget::BuildRequest(const TraceRequest& request) const {
  weft::v1::GenerateRequest req;
  req.set_model(options_.model);
  req.mutable_token_ids()->mutable_ids()->Assign(request.prompt.begin(), request.prompt.end());
  req.mutable_sampling()->set_temperature(static_cast<float>(options_.temperature));
  req.mutable_stopping()->set_max_tokens(request.max_tokens);
  req.mutable_stopping()->set_ignore_eos(true);
  if (options_.constrained_fraction > 0) {
    uint64_t h = 1469598103934665603ULL;  // FNV-1a over the prompt ids
    for (int32_t t : request.prompt) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ULL;
    if (static_cast<double>(h % 1000000) < options_.constrained_fraction * 1e6) {
      req.mutable_constraint()->set_json_schema(options_.constraint_json_schema);
      req.mutable_stopping()->set_ignore_eos(false);
    }
  }
  return req;
}

void GrpcTarget::Run(const TraceRequest& request, const RunClock& clock,
                     std::atomic<int64_t>* live_tokens, RequestRecord* record) {
  const weft::v1::GenerateRequest req = BuildRequest(request);
  record->arrivals.reserve(static_cast<size_t>(request.max_tokens) + 1);
  Call call(clock, live_tokens, record);
  call.ctx.set_deadline(std::chrono::system_clock::now() +
                        std::chrono::microseconds(static_cast<int64_t>(options_.timeout_s * 1e6)));
  Connection* connection = Acquire();
  record->send_ns = clock.NowNs();
  call.reader = connection->stub->PrepareAsyncGenerate(&call.ctx, req, &cq_);
  call.reader->StartCall(&call);
  call.done.WaitForNotification();
  Release(connection);
}

}  // namespace bench
}  // namespace weft

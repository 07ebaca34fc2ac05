#include "scheduler/service/health_service.h"

#include <utility>

namespace weft {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// One Watch call: the gRPC writer of its WatchQueue.
class HealthService::WatchReactor : public grpc::ServerWriteReactor<HealthCheckResponse>,
                                    public WriteTarget<HealthCheckResponse> {
 public:
  WatchReactor(HealthService* service, std::shared_ptr<WatchQueue> queue,
               grpc::CallbackServerContext* context)
      : service_(service), queue_(std::move(queue)), context_(context) {
    queue_->Attach(NotOwned<HealthCheckResponse>(this));
  }

  // WriteTarget: only the queue calls these, one write at a time.
  void WriteMessage(const HealthCheckResponse* response) override { StartWrite(response); }
  void FinishCall(const absl::Status& status) override { Finish(ToGrpcStatus(status)); }
  void CancelCall(const absl::Status& status) override { CancelServerCall(context_, status); }

  void OnWriteDone(bool ok) override { queue_->OnWriteDone(ok); }
  // A cancelled call must still be finished by the server.
  void OnCancel() override { queue_->Finish(absl::CancelledError("cancelled")); }
  void OnDone() override {
    queue_->OnCallDone();
    service_->Unregister(queue_.get());
    delete this;
  }

 private:
  HealthService* const service_;
  const std::shared_ptr<WatchQueue> queue_;
  grpc::CallbackServerContext* const context_;
};

namespace {

std::set<std::string> WithServer(std::vector<std::string> names) {
  std::set<std::string> s(names.begin(), names.end());
  s.insert("");
  return s;
}

}  // namespace

HealthService::HealthService(std::vector<std::string> services)
    : services_(WithServer(std::move(services))) {}

HealthService::~HealthService() { Shutdown(); }

HealthService::ServingStatus HealthService::StatusLocked(const std::string& service) const {
  if (services_.count(service) == 0) return HealthCheckResponse::SERVICE_UNKNOWN;
  return serving_ && !shut_down_ ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

HealthService::ServingStatus HealthService::Status(const std::string& service) const {
  MutexLock lock(&mu_);
  return StatusLocked(service);
}

void HealthService::SetServing(bool serving) {
  {
    MutexLock lock(&mu_);
    if (shut_down_ || serving_ == serving) return;
    serving_ = serving;
  }
  NotifyWatches();
}

void HealthService::Shutdown() {
  {
    MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  NotifyWatches();
}

namespace {

HealthCheckResponse Response(HealthService::ServingStatus status) {
  HealthCheckResponse r;
  r.set_status(status);
  return r;
}

const absl::Status kShuttingDown = absl::UnavailableError("the server is shutting down");

}  // namespace

void HealthService::NotifyWatches() {
  MutexLock order(&notify_mu_);
  std::vector<std::pair<std::shared_ptr<WatchQueue>, ServingStatus>> open;
  bool end = false;
  {
    MutexLock lock(&mu_);
    end = shut_down_;
    for (const auto& [q, watch] : watches_) open.emplace_back(watch.queue, StatusLocked(watch.service));
  }
  for (auto& [queue, status] : open) {
    queue->Push(Response(status));
    if (end) queue->Finish(kShuttingDown);
  }
}

void HealthService::Unregister(const WatchQueue* queue) {
  MutexLock lock(&mu_);
  watches_.erase(queue);
  watch_ended_.SignalAll();
}

bool HealthService::WaitForWatchesAtMost(int n, absl::Time deadline) const {
  MutexLock lock(&mu_);
  while (static_cast<int>(watches_.size()) > n) {
    if (absl::Now() >= deadline) return false;
    watch_ended_.WaitWithTimeout(&mu_, deadline - absl::Now());
  }
  return true;
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* context,
                                               const HealthCheckRequest* request,
                                               HealthCheckResponse* response) {
  auto* reactor = context->DefaultReactor();
  const ServingStatus status = Status(request->service());
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::NOT_FOUND,
                     "unknown service (ask for \"\", weft.v1.Generation or the model name)"));
  } else {
    response->set_status(status);
    reactor->Finish(grpc::Status::OK);
  }
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(
    grpc::CallbackServerContext* context, const HealthCheckRequest* request) {
  auto queue = std::make_shared<WatchQueue>(WatchQueue::Options{
      /*max_bytes=*/1 << 10, /*error_drops_queued=*/false, /*coalesce=*/true});
  auto* reactor = new WatchReactor(this, queue, context);
  MutexLock order(&notify_mu_);
  ServingStatus status;
  bool end;
  {
    MutexLock lock(&mu_);
    watches_[queue.get()] = OpenWatch{queue, request->service()};
    status = StatusLocked(request->service());
    end = shut_down_;
  }
  queue->Push(Response(status));
  if (end) queue->Finish(kShuttingDown);
  return reactor;
}

}  // namespace weft

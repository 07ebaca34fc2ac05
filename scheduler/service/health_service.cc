#include "scheduler/service/health_service.h"

#include <utility>

namespace weft {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// One Watch call: writes the status it was last told whenever it differs from the last
// one written, one write at a time, and finishes when told to end (after writing).
class HealthService::WatchReactor : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  WatchReactor(HealthService* service, std::string service_name)
      : service_(service), name_(std::move(service_name)) {}

  const std::string& name() const { return name_; }

  // The status to report; with `end`, the stream ends once it is written.
  void Update(ServingStatus status, bool end) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      MutexLock lock(&mu_);
      wanted_ = status;
      if (end && !end_) {
        end_ = true;
        end_status_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down");
      }
    }
    Pump();
  }

  void OnWriteDone(bool ok) override {
    {
      MutexLock lock(&mu_);
      write_in_flight_ = false;
      if (!ok) Broken();
    }
    Pump();
  }
  void OnCancel() override {
    {
      MutexLock lock(&mu_);
      Broken();
    }
    Pump();
  }
  void OnDone() override { service_->Unregister(this); }

 private:
  // The call is cancelled or broken: write nothing more, finish.
  void Broken() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    broken_ = true;
    end_ = true;
    end_status_ = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
  }

  // Starts the next write or the finish; never holds mu_ across the gRPC call.
  void Pump() ABSL_LOCKS_EXCLUDED(mu_) {
    bool write = false, finish = false;
    grpc::Status status;
    {
      MutexLock lock(&mu_);
      if (write_in_flight_ || finish_started_) return;
      if (!broken_ && (!sent_any_ || sent_ != wanted_)) {
        sent_any_ = true;
        sent_ = wanted_;
        out_.set_status(sent_);
        write_in_flight_ = true;
        write = true;
      } else if (end_) {
        finish_started_ = true;
        finish = true;
        status = end_status_;
      }
    }
    if (write) {
      StartWrite(&out_);  // out_ is not touched until OnWriteDone
    } else if (finish) {
      Finish(status);
    }
  }

  HealthService* const service_;
  const std::string name_;
  Mutex mu_;
  ServingStatus wanted_ ABSL_GUARDED_BY(mu_) = HealthCheckResponse::SERVICE_UNKNOWN;
  ServingStatus sent_ ABSL_GUARDED_BY(mu_) = HealthCheckResponse::UNKNOWN;
  bool sent_any_ ABSL_GUARDED_BY(mu_) = false;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool end_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_started_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status end_status_ ABSL_GUARDED_BY(mu_);
  HealthCheckResponse out_;
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

int HealthService::num_watches() const {
  MutexLock lock(&mu_);
  return static_cast<int>(watches_.size());
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

void HealthService::NotifyWatches() {
  std::vector<std::pair<WatchReactor*, ServingStatus>> pinned;
  bool end = false;
  {
    MutexLock lock(&mu_);
    end = shut_down_;
    for (auto& [w, entry] : watches_) {
      if (entry.done) continue;
      ++entry.pins;
      pinned.emplace_back(w, StatusLocked(w->name()));
    }
  }
  for (auto& [w, status] : pinned) w->Update(status, end);
  MutexLock lock(&mu_);
  for (auto& [w, status] : pinned) {
    auto it = watches_.find(w);
    if (--it->second.pins == 0 && it->second.done) {
      watches_.erase(it);
      delete w;
    }
  }
}

void HealthService::Unregister(WatchReactor* watch) {
  MutexLock lock(&mu_);
  auto it = watches_.find(watch);
  if (it->second.pins > 0) {
    it->second.done = true;  // the last unpin deletes it
    return;
  }
  watches_.erase(it);
  delete watch;
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
  auto* w = new WatchReactor(this, request->service());
  ServingStatus status;
  bool end;
  {
    MutexLock lock(&mu_);
    watches_[w].pins = 1;  // pinned until its first Update is done
    status = StatusLocked(w->name());
    end = shut_down_;
  }
  w->Update(status, end);
  MutexLock lock(&mu_);
  auto it = watches_.find(w);
  if (--it->second.pins == 0 && it->second.done) {
    watches_.erase(it);
    delete w;
  }
  return w;
}

}  // namespace weft

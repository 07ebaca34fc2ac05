// HealthService: grpc.health.v1.Health on weft-scheduler's public port, per service.
//
// Services: "" (the server as a whole), "weft.v1.Generation" and the served model's
// name; all of them follow SetServing together (one scheduler serves one model), so a
// proxy or client may ask about whichever it routes by — a load balancer asks for the
// model name and so also learns that this backend really serves that model. Any other
// name: Check is NOT_FOUND and Watch sends SERVICE_UNKNOWN, as the protocol says.
//
// It replaces gRPC's built-in health service (grpc::EnableDefaultHealthCheckService),
// which is added behind the reflection plugin's back: registered as an ordinary service
// built from proto/grpc/health/v1/health.proto, it is listed and described by server
// reflection like weft.v1.Generation.
//
// Watch streams send the current status at once and every change after, each through a
// WriteQueue (write_queue.h: one write at a time, the finish exactly once); statuses
// that pile up behind a slow reader merge into the latest (a watcher may see one
// repeated, never misses the last). Shutdown() sets NOT_SERVING for good and ends the
// open Watch streams (UNAVAILABLE) once that status is written, so they do not hold the
// server's shutdown.
//
// Ownership: gRPC owns each Watch reactor until OnDone, which unregisters its queue here.
// Thread-safety: every method is safe from any thread.
#ifndef WEFT_SCHEDULER_SERVICE_HEALTH_SERVICE_H_
#define WEFT_SCHEDULER_SERVICE_HEALTH_SERVICE_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "scheduler/service/write_queue.h"

namespace weft {

class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

  // `services` are the known names ("" is always added); all start NOT_SERVING.
  explicit HealthService(std::vector<std::string> services);
  ~HealthService() override;

  void SetServing(bool serving) ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_SERVING from now on (SetServing is ignored) and Watch streams ended.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);
  // The status Check would report for `service` (nullopt-like: SERVICE_UNKNOWN).
  ServingStatus Status(const std::string& service) const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until at most `n` Watch streams are open (the server ends its side of a call
  // after the client's); false if `deadline` passed first.
  bool WaitForWatchesAtMost(int n, absl::Time deadline) const ABSL_LOCKS_EXCLUDED(mu_);

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::health::v1::HealthCheckResponse* response) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request) override;

 private:
  class WatchReactor;
  using WatchQueue = WriteQueue<grpc::health::v1::HealthCheckResponse>;
  struct OpenWatch {
    std::shared_ptr<WatchQueue> queue;
    std::string service;
  };

  // Queues the current status on every open Watch (and ends them after Shutdown).
  void NotifyWatches() ABSL_LOCKS_EXCLUDED(mu_, notify_mu_);
  // OnDone of a Watch: forget it.
  void Unregister(const WatchQueue* queue) ABSL_LOCKS_EXCLUDED(mu_);
  ServingStatus StatusLocked(const std::string& service) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::set<std::string> services_;
  // Held while statuses are queued (never while a reactor might call back into mu_'s
  // users): pushes happen in the order the statuses were read, so each Watch's last
  // queued status is the current one.
  Mutex notify_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable Mutex mu_;
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::map<const WatchQueue*, OpenWatch> watches_ ABSL_GUARDED_BY(mu_);
  mutable CondVar watch_ended_;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_HEALTH_SERVICE_H_

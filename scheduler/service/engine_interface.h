// EngineInterface: what the gRPC services need from the planning thread. Every method
// only enqueues (or reads an atomic) and returns at once; none blocks on planning.
// Thread-safety: all methods are thread-safe.
#ifndef WEFT_SCHEDULER_SERVICE_ENGINE_INTERFACE_H_
#define WEFT_SCHEDULER_SERVICE_ENGINE_INTERFACE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "scheduler/service/access_log.h"
#include "scheduler/service/metrics.h"
#include "scheduler/service/response_stream.h"
#include "scheduler/request_spec.h"
#include "scheduler/service/worker_link.h"
#include "weft/v1/generate.pb.h"
#include "weft/v1/worker.pb.h"

namespace weft {

// A validated request on its way to the planning thread.
struct Submission {
  int64_t key = 0;                  // unique per call; used to cancel
  std::optional<ValidRequest> request;  // always set (std::optional: made before it)
  std::shared_ptr<Outbox> outbox;   // where responses go
  absl::Time arrival;
  AccessIdentity who;  // for the call's access-log line when it ends
};

// Ends a submission that was never admitted to the core (refused at admission, its
// grammar failed, the client left or the server stopped before it got there): the client
// gets `status`, the call is counted in weft_requests_status_total (`metrics`; null in
// tests without metrics) and gets its access-log line (which runs who.on_end).
inline void EndSubmission(Submission& s, const absl::Status& status, absl::Time now,
                          ServiceMetrics* metrics) {
  if (metrics != nullptr) metrics->ByStatus(absl::StatusCodeToString(status.code())).Increment();
  s.outbox->Finish(status);
  AccessRecord rec;
  rec.who = std::move(s.who);
  rec.code = status.code();
  rec.duration = now - s.arrival;
  LogAccess(rec);
}

class EngineInterface {
 public:
  virtual ~EngineInterface() = default;
  // Admission: RESOURCE_EXHAUSTED when the queue is full, UNAVAILABLE when no replica is
  // attached or the scheduler drains. On OK the engine owns the stream's ending.
  virtual absl::Status Submit(Submission submission) = 0;
  // The client went away: free the request's blocks within one iteration.
  virtual void Cancel(int64_t key) = 0;
  virtual void OnWorkerMessage(const std::shared_ptr<WorkerHandle>& worker,
                               weft::v1::WorkerMessage message) = 0;
  virtual void OnWorkerGone(const std::shared_ptr<WorkerHandle>& worker) = 0;
  // Fills ListModels' entry for the served model.
  virtual weft::v1::ModelInfo ModelInfo() const = 0;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_ENGINE_INTERFACE_H_

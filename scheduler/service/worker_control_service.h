// WorkerControlService: the scheduler's internal gRPC service on the attach port. Each
// worker's Attach stream becomes a WorkerHandle (worker_link.h) whose messages and end go
// to the engine's inbox; the planning thread does everything else.
// Thread-safety: gRPC calls these from its threads; state is atomics + the engine.
#ifndef WEFT_SCHEDULER_SERVICE_WORKER_CONTROL_SERVICE_H_
#define WEFT_SCHEDULER_SERVICE_WORKER_CONTROL_SERVICE_H_

#include <atomic>
#include <cstdint>

#include "scheduler/service/engine_interface.h"
#include "weft/v1/worker.grpc.pb.h"

namespace weft {

// Attach is a raw method (the wire bytes are WorkerMessage / SchedulerMessage): plans are
// serialized once for all ranks of a replica (WorkerLink).
class WorkerControlService final
    : public weft::v1::WorkerControl::WithRawCallbackMethod_Attach<
          weft::v1::WorkerControl::Service> {
 public:
  explicit WorkerControlService(EngineInterface* engine) : engine_(engine) {}

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Attach(
      grpc::CallbackServerContext* context) override;

 private:
  EngineInterface* const engine_;
  std::atomic<int64_t> next_id_{1};
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_WORKER_CONTROL_SERVICE_H_

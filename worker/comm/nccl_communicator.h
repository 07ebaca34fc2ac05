// NcclCommunicator: the GPU implementation of Communicator, over NCCL (built only with
// --config=cuda).
//
// Group formation: rank 0 makes a unique id (NewUniqueId, 128 opaque bytes) and sends
// it in its WorkerHello.comm_init; the scheduler relays rank 0's bytes to every rank in
// Welcome.comm_init; each rank then calls Create with them (ncclCommInitRankConfig).
// A new attachment (epoch) forms a new group with a new id: a stale group is never
// joined.
//
// Non-blocking communicators (ncclConfig_t.blocking = 0) everywhere: initialization and
// every collective are enqueued, then the host polls — cudaStreamQuery for completion,
// ncclCommGetAsyncError for NCCL failures (a peer that died, a broken connection), the
// call's deadline (timeout()) and the Abort flag — every ~50 us. On the deadline, an
// NCCL error or Abort() the communicator is aborted with ncclCommAbort, which makes the
// NCCL kernels still queued on the GPU return, so a dead rank fails its peers'
// collectives instead of hanging them. Failures are sticky (the group must be rebuilt).
// Unlike ShmCommunicator, an Abort() here is not pushed to the peers: they fail at their
// own deadline (DeadlineExceeded) or when NCCL notices the broken connection.
//
// Memory: every pointer is device memory of this rank's GPU (or memory the GPU can
// access, e.g. cudaMallocManaged). Sum order: NCCL's (ring/tree, fixed for a fixed
// topology and NCCL_ALGO/NCCL_PROTO): every rank gets the same bits and runs repeat
// bitwise, but the per-element order is not the "rank 0, 1, ..., W-1" of the CPU
// implementation.
//
// Two APIs: the Communicator methods are host-synchronous (enqueue on the
// communicator's own stream, then wait); the CUDA backend uses AllReduceSumAsync on its
// compute stream (no host round trip per layer) and Wait(stream) once per step.
//
// Ownership: owns the ncclComm_t and its stream. Thread-safety: as Communicator —
// collectives and Wait from one thread; Abort, SetTimeout, timeout, rank, world_size
// from any thread.
#ifndef WEFT_WORKER_COMM_NCCL_COMMUNICATOR_H_
#define WEFT_WORKER_COMM_NCCL_COMMUNICATOR_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "worker/comm/communicator.h"

namespace weft {

struct NcclCommunicatorOptions {
  int rank = 0;
  int world_size = 1;
  int device = 0;  // CUDA device of this rank
  // Deadline of group formation and of every collective (SetTimeout changes it).
  absl::Duration timeout = absl::Seconds(30);

  absl::Status Validate() const;
};

class NcclCommunicator final : public Communicator {
 public:
  // A fresh NCCL unique id (rank 0's comm_init bytes).
  static absl::StatusOr<std::string> NewUniqueId();

  // Joins the group named by `unique_id` (NewUniqueId's bytes from rank 0). Fails with
  // DeadlineExceeded when the group is not complete within options.timeout (a missing
  // peer), InvalidArgument for malformed bytes, Internal for a CUDA/NCCL error.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      absl::string_view unique_id, const NcclCommunicatorOptions& options);

  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  absl::Status AllReduceSum(float* data, size_t count) override;
  absl::Status AllGatherV(const float* in, size_t my_count, const std::vector<size_t>& counts,
                          float* out) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::Status Barrier() override;
  void Abort(absl::string_view reason) override ABSL_LOCKS_EXCLUDED(mu_);
  void SetTimeout(absl::Duration timeout) override;
  absl::Duration timeout() const override;

  // Enqueues an in-place sum of data[0, count) on `stream` (no wait).
  absl::Status AllReduceSumAsync(float* data, size_t count, cudaStream_t stream);
  // Waits until all work queued on `stream` has completed, failing (and aborting the
  // communicator) at the deadline, on an NCCL error or on Abort().
  absl::Status Wait(cudaStream_t stream);

 private:
  NcclCommunicator(const NcclCommunicatorOptions& options, ncclComm_t comm, cudaStream_t stream);

  // The sticky failure, if any (Aborted after Abort()).
  absl::Status CheckUsable() ABSL_LOCKS_EXCLUDED(mu_);
  // Polls ncclCommGetAsyncError until the communicator leaves ncclInProgress (after a
  // non-blocking call returned), within the deadline.
  absl::Status SettleAsync(absl::Time deadline, const char* what);
  // Records `status` as the sticky failure and aborts the NCCL communicator.
  absl::Status Fail(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status NcclCall(ncclResult_t result, const char* what);
  absl::Time Deadline() const;

  const NcclCommunicatorOptions options_;
  ncclComm_t comm_;
  bool comm_aborted_ = false;  // touched by the collective thread only
  cudaStream_t stream_;
  float* scratch_ = nullptr;  // one float for Barrier
  std::atomic<int64_t> timeout_ns_;
  std::atomic<bool> abort_requested_{false};
  mutable Mutex mu_;
  std::string abort_reason_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weft

#endif  // WEFT_WORKER_COMM_NCCL_COMMUNICATOR_H_

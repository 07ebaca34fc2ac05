// Communicator: the collective interface used by tensor parallelism, plus
// LocalCommunicator, the trivial world_size == 1 implementation.
//
// A replica is a tensor-parallel group of `world_size` ranks, one process each. Every
// rank calls the same collectives, with the same sizes, in the same order; each call
// returns only when this rank's part of the collective is complete. Implementations:
// ShmCommunicator (CPU, POSIX shared memory, shm_communicator.h) and, later, NCCL.
//
// Failure contract (all implementations):
//   * Every call has a deadline (`timeout()`, adjustable at run time with SetTimeout
//     because the step deadline is adaptive). A dead or stopped peer makes the call fail
//     with DeadlineExceeded / Unavailable within the deadline; it never hangs.
//   * Abort(reason) makes every pending and future call on *every* rank of the group
//     fail quickly with Aborted. It is sticky: the group must be rebuilt (new epoch).
//   * After any failed collective the group's state is undefined, so the failure is
//     sticky too (and propagated to the peers as an abort).
//
// Thread-safety: collectives must be called from one thread at a time (each worker rank
// runs its steps on one thread). Abort(), SetTimeout(), timeout(), rank() and
// world_size() may be called from any thread at any time, e.g. by a step watchdog.
#ifndef WEFT_WORKER_COMM_COMMUNICATOR_H_
#define WEFT_WORKER_COMM_COMMUNICATOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace weft {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // In-place sum over ranks of `data[0, count)`. On return every rank holds the same
  // bits. The summation order is fixed (rank 0, 1, ..., W-1 per element), so results are
  // bitwise repeatable run to run; they differ from a single-process sum only by fp32
  // rounding.
  virtual absl::Status AllReduceSum(float* data, size_t count) = 0;

  // out[r * count_per_rank + i] = in_of_rank_r[i]. `out` holds world_size *
  // count_per_rank floats and must not overlap `in`.
  virtual absl::Status AllGather(const float* in, size_t count_per_rank, float* out);

  // Variable-count gather (uneven shards: KV groups, vocabulary slices). counts has
  // world_size entries, counts[rank()] == my_count, identical on every rank; rank r's
  // data lands at out + counts[0] + ... + counts[r-1]. `out` must not overlap `in`.
  virtual absl::Status AllGatherV(const float* in, size_t my_count,
                                  const std::vector<size_t>& counts, float* out) = 0;

  // Copies `bytes` bytes at `data` on rank `root` to `data` on every other rank.
  virtual absl::Status Broadcast(void* data, size_t bytes, int root) = 0;

  // Returns once every rank has entered Barrier().
  virtual absl::Status Barrier() = 0;

  // Fails every pending and future call on every rank with Aborted(reason). Idempotent;
  // the first reason wins.
  virtual void Abort(absl::string_view reason) = 0;

  // Per-call deadline: each collective fails if it has not completed `timeout` after
  // it started. Takes effect for calls that start after it returns.
  virtual void SetTimeout(absl::Duration timeout) = 0;
  virtual absl::Duration timeout() const = 0;
};

// Checks the arguments of AllGatherV against the group shape. Shared by implementations
// so that every backend rejects the same misuse with the same message.
absl::Status ValidateAllGatherV(int rank, int world_size, const float* in, size_t my_count,
                                const std::vector<size_t>& counts, const float* out);

// world_size == 1: reductions are no-ops, gathers copy, Abort is still sticky.
class LocalCommunicator final : public Communicator {
 public:
  explicit LocalCommunicator(absl::Duration timeout = absl::Seconds(10));

  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  absl::Status AllReduceSum(float* data, size_t count) override;
  absl::Status AllGatherV(const float* in, size_t my_count, const std::vector<size_t>& counts,
                          float* out) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::Status Barrier() override;
  void Abort(absl::string_view reason) override ABSL_LOCKS_EXCLUDED(mu_);
  void SetTimeout(absl::Duration timeout) override;
  absl::Duration timeout() const override;

 private:
  absl::Status CheckNotAborted() const ABSL_LOCKS_EXCLUDED(mu_);

  std::atomic<bool> aborted_{false};
  std::atomic<int64_t> timeout_ns_;
  mutable Mutex mu_;
  std::string abort_reason_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weft

#endif  // WEFT_WORKER_COMM_COMMUNICATOR_H_

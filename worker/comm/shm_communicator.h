// ShmCommunicator: the CPU implementation of Communicator for the ranks of one replica
// on one host, over a POSIX shared-memory segment (ShmSegment) named for the replica.
//
// Protocol (see shm_segment.h for the layout). Each rank owns a monotonically increasing
// 32-bit `phase` word; publishing a phase is a seq_cst store (release for the data the
// rank wrote before it) plus a FUTEX_WAKE when a peer sleeps on it. Every collective is a
// fixed number of phases, identical on all ranks, so waiting for phase k of a peer needs
// no sequence exchange and phases of different collectives never mix up. A wait spins
// briefly, then sleeps on the futex in slices of at most 20 ms, each time re-checking
// the call's deadline, the segment's abort flag and the peer's liveness.
//
//   AllReduceSum (per piece of at most max_bytes): copy input into my slot; phase;
//     reduce-scatter: rank r sums chunk r over the slots in rank order 0..W-1 and
//     writes it over chunk r of its own slot; phase; all-gather: copy every rank's
//     reduced chunk out. Each rank reduces count / W elements, so the work per rank
//     does not grow with W; chunk bounds depend only on (count, W) and the per-element
//     order is fixed, so the result is bitwise identical on every rank and every run.
//   AllGatherV / Broadcast: copy into my slot; phase; copy out.  Barrier: one phase.
//   Data slots are double-buffered by round parity: a rank rewrites parity p only in
//   round n + 2, after all peers published round n + 1, i.e. after they finished
//   reading round n. No trailing barrier is needed.
//
// Argument errors (InvalidArgument) are found before any shared state is touched and
// are not sticky; a rank that gets one should Abort() so its peers do not wait for it.
// Every rank publishes a signature of each call (op and sizes) with the call's first
// phase; a rank whose peer is in another call fails with FailedPrecondition.
// Failures: a wait that passes the deadline, sees its peer's `alive` flag cleared or
// its pid gone returns DeadlineExceeded / Unavailable naming that rank, and aborts the
// segment so the other ranks fail at once instead of at their own deadlines. Failures
// are sticky. Abort() flags the segment, wakes every futex word and fails every pending
// and future call on every rank with Aborted.
//
// Ownership: owns its ShmSegment mapping; rank 0 unlinks the segment name when it is
// destroyed. Thread-safety: as Communicator (collectives from one thread; Abort,
// SetTimeout, timeout from any thread).
#ifndef WEFT_WORKER_COMM_SHM_COMMUNICATOR_H_
#define WEFT_WORKER_COMM_SHM_COMMUNICATOR_H_

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
#include "worker/comm/shm_segment.h"

namespace weft {

struct ShmCommunicatorOptions {
  // Replica name + epoch, e.g. "qwen-r0-e3": [A-Za-z0-9._-], 1..200 characters. The
  // segment is /dev/shm/weft-comm-<name>.
  std::string name;
  int rank = 0;
  int world_size = 1;
  // Capacity of each rank's data slot. Larger calls run in several rounds.
  size_t max_bytes = 4 << 20;
  // The replica's epoch: ranks attach only to this generation; rank 0 replaces a
  // segment of any other generation.
  uint64_t generation = 0;
  // Deadline of each collective (adjustable later with SetTimeout).
  absl::Duration timeout = absl::Seconds(10);
  // Deadline of Create(): rank 0 creating, every rank attaching and finding all peers.
  absl::Duration attach_timeout = absl::Seconds(30);
  // Rank 0 replaces stale segments (crashed creator, other generation, bad header).
  bool replace_stale = true;
  // Check peers' pids while waiting (dead peer -> Unavailable before the deadline) and
  // treat a segment whose creator is gone as stale. Applies only to processes in this
  // PID namespace (recorded in the segment); others fall back to the deadline.
  bool check_pids = true;

  absl::Status Validate() const;
};

class ShmCommunicator final : public Communicator {
 public:
  // Rank 0 creates the segment, other ranks attach to it; returns once all world_size
  // ranks are attached (or fails at options.attach_timeout).
  static absl::StatusOr<std::unique_ptr<ShmCommunicator>> Create(
      const ShmCommunicatorOptions& options);

  // Cleanup of segments left by crashed runs (see ShmSegment).
  static absl::StatusOr<bool> RemoveIfStale(absl::string_view name) {
    return ShmSegment::RemoveIfStale(name);
  }
  static absl::StatusOr<int> RemoveStaleSegments() {
    return ShmSegment::RemoveStaleSegments();
  }

  // Marks this rank as gone (peers waiting on it fail with Unavailable), unmaps the
  // segment, and on rank 0 unlinks it.
  ~ShmCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  absl::Status AllReduceSum(float* data, size_t count) override;
  absl::Status AllGatherV(const float* in, size_t my_count, const std::vector<size_t>& counts,
                          float* out) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::Status Barrier() override;
  void Abort(absl::string_view reason) override ABSL_LOCKS_EXCLUDED(mu_);
  void SetTimeout(absl::Duration timeout) override;
  absl::Duration timeout() const override;

 private:
  // One collective call in flight: names it in error messages and carries its deadline.
  struct Call {
    const char* op = "";
    uint64_t signature = 0;  // op + sizes; must match on every rank
    uint64_t index = 0;      // 1-based count of collectives this rank has started
    absl::Time deadline;
    bool synced = false;     // its first phase (with the signature check) has run
  };

  ShmCommunicator(const ShmCommunicatorOptions& options, std::unique_ptr<ShmSegment> segment);

  absl::Status Rendezvous(absl::Time deadline);
  // Starts a collective: fails if this rank or the segment is aborted or failed.
  absl::Status Begin(const char* op, uint64_t signature, Call* call) ABSL_LOCKS_EXCLUDED(mu_);
  // Publishes this rank's next phase and waits until every peer published it too; the
  // first phase of a call also checks that every peer is in the same call.
  absl::Status Phase(Call* call);
  absl::Status WaitForPeer(int peer, uint32_t target, const Call& call);
  absl::Status CheckPeer(int peer, const Call& call) const;
  // Whether `peer`'s pid can be checked for liveness (check_pids, same PID namespace).
  bool PidCheckable(int peer) const;
  absl::Status SegmentAbortedError() const;
  // Records a failed collective (sticky), aborts the segment so peers fail fast.
  absl::Status Fail(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Status AllReduceRound(float* data, size_t count, Call* call);
  absl::Status AllGatherRound(const float* in, const std::vector<size_t>& counts,
                              const std::vector<size_t>& displs, size_t offset,
                              size_t piece, float* out, Call* call);

  const int rank_;
  const int world_size_;
  const bool check_pids_;
  const std::unique_ptr<ShmSegment> segment_;
  const size_t slot_floats_;  // slot capacity in floats

  // Owned by the collective thread.
  uint32_t phase_ = 0;        // phases published so far
  uint64_t num_rounds_ = 0;   // data rounds so far; its parity picks the buffer
  uint64_t num_calls_ = 0;    // collectives started so far
  uint64_t num_synced_calls_ = 0;  // calls that ran a phase; picks the signature slot
  std::vector<int32_t> peer_pids_;
  bool claimed_ = false;  // we own control(rank_)->pid

  std::atomic<int64_t> timeout_ns_;
  std::atomic<bool> failed_{false};
  mutable Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weft

#endif  // WEFT_WORKER_COMM_SHM_COMMUNICATOR_H_

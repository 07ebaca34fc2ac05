#include "worker/comm/shm_communicator.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "worker/comm/futex.h"
#include "worker/comm/reduce.h"

namespace weft {
namespace {

// Waiting: spin (the peer is usually microseconds away), then yield (the machine may be
// oversubscribed: a spinning waiter would steal the peer's core), then futex sleeps in
// slices so that deadline, abort flag and liveness are re-checked at least this often.
constexpr int kSpinIterations = 256;
constexpr int kYieldIterations = 16;
constexpr absl::Duration kMaxSleepSlice = absl::Milliseconds(20);
constexpr absl::Duration kLivenessInterval = absl::Milliseconds(20);

// What a rank is doing in a call: the op in the top byte, a hash of its sizes below.
// Peers compare signatures at the first phase of every call, so mismatched collectives
// (a TP bug that would otherwise corrupt data or hang) fail with FailedPrecondition.
enum class OpCode : uint64_t { kAllReduceSum = 1, kAllGatherV = 2, kBroadcast = 3, kBarrier = 4 };

const char* OpName(uint64_t signature) {
  switch (static_cast<OpCode>(signature >> 56)) {
    case OpCode::kAllReduceSum: return "AllReduceSum";
    case OpCode::kAllGatherV: return "AllGatherV";
    case OpCode::kBroadcast: return "Broadcast";
    case OpCode::kBarrier: return "Barrier";
  }
  return "?";
}

uint64_t Signature(OpCode op, const uint64_t* params, size_t num_params) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < num_params; ++i) h = (h ^ params[i]) * 0x100000001b3ull;
  return (static_cast<uint64_t>(op) << 56) | (h & ((uint64_t{1} << 56) - 1));
}

uint64_t Signature(OpCode op, std::initializer_list<uint64_t> params) {
  return Signature(op, params.begin(), params.size());
}

bool Reached(uint32_t value, uint32_t target) {
  return static_cast<int32_t>(value - target) >= 0;  // wrap-around safe
}

ShmSegmentOptions SegmentOptions(const ShmCommunicatorOptions& options) {
  ShmSegmentOptions seg;
  seg.name = options.name;
  seg.world_size = options.world_size;
  seg.slot_bytes = options.max_bytes;
  seg.generation = options.generation;
  seg.replace_stale = options.replace_stale;
  seg.check_pids = options.check_pids;
  return seg;
}

}  // namespace

absl::Status ShmCommunicatorOptions::Validate() const {
  WEFT_RETURN_IF_ERROR(SegmentOptions(*this).Validate());
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " not in [0, world_size ", world_size, ")"));
  }
  if (timeout <= absl::ZeroDuration() || attach_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeout and attach_timeout must be positive");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ShmCommunicator>> ShmCommunicator::Create(
    const ShmCommunicatorOptions& options) {
  WEFT_RETURN_IF_ERROR(options.Validate());
  const absl::Time deadline = absl::Now() + options.attach_timeout;
  const ShmSegmentOptions seg_options = SegmentOptions(options);
  std::unique_ptr<ShmSegment> segment;
  if (options.rank == 0) {
    WEFT_ASSIGN_OR_RETURN(segment, ShmSegment::Create(seg_options));
  } else {
    WEFT_ASSIGN_OR_RETURN(segment, ShmSegment::Attach(seg_options, deadline));
  }
  std::unique_ptr<ShmCommunicator> comm(new ShmCommunicator(options, std::move(segment)));
  WEFT_RETURN_IF_ERROR(comm->Rendezvous(deadline));
  return comm;
}

ShmCommunicator::ShmCommunicator(const ShmCommunicatorOptions& options,
                                 std::unique_ptr<ShmSegment> segment)
    : rank_(options.rank),
      world_size_(options.world_size),
      check_pids_(options.check_pids),
      segment_(std::move(segment)),
      slot_floats_(segment_->slot_bytes() / sizeof(float)),
      peer_pids_(options.world_size, 0),
      timeout_ns_(absl::ToInt64Nanoseconds(options.timeout)) {}

ShmCommunicator::~ShmCommunicator() {
  if (!claimed_) return;
  ShmRankControl* mine = segment_->control(rank_);
  mine->alive.store(0, std::memory_order_seq_cst);
  FutexWakeAll(&mine->phase);  // peers waiting on us notice we left
}

absl::Status ShmCommunicator::Rendezvous(absl::Time deadline) {
  ShmRankControl* mine = segment_->control(rank_);
  int32_t holder = 0;
  if (!mine->pid.compare_exchange_strong(holder, getpid(), std::memory_order_seq_cst)) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "%s: rank %d is already attached by pid %d (%s)", segment_->shm_name(), rank_, holder,
        ProcessAlive(holder) ? "alive" : "dead; re-create the group with a new generation"));
  }
  claimed_ = true;
  mine->pid_ns.store(PidNamespaceId(), std::memory_order_seq_cst);
  mine->alive.store(1, std::memory_order_seq_cst);
  absl::Duration backoff = absl::Microseconds(50);
  while (true) {
    std::vector<int> missing;
    for (int r = 0; r < world_size_; ++r) {
      peer_pids_[r] = segment_->control(r)->pid.load(std::memory_order_acquire);
      if (peer_pids_[r] == 0) missing.push_back(r);
    }
    // Complete once every rank attached, even if one has left since: that is for the
    // collectives to report.
    if (missing.empty()) return absl::OkStatus();
    for (int r = 0; r < world_size_; ++r) {
      if (peer_pids_[r] != 0 && PidCheckable(r) && !ProcessAlive(peer_pids_[r])) {
        return absl::UnavailableError(absl::StrFormat(
            "%s: rank %d (pid %d) died while the group was forming", segment_->shm_name(), r,
            peer_pids_[r]));
      }
    }
    if (segment_->header()->aborted.load(std::memory_order_acquire) != 0) {
      return SegmentAbortedError();
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          segment_->shm_name(), ": rank ", rank_, " timed out waiting for rank(s) ",
          absl::StrJoin(missing, ","), " to attach"));
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(2));
  }
}

bool ShmCommunicator::PidCheckable(int peer) const {
  return check_pids_ &&
         SamePidNamespace(segment_->control(peer)->pid_ns.load(std::memory_order_acquire));
}

absl::Status ShmCommunicator::SegmentAbortedError() const {
  const ShmHeader* h = segment_->header();
  return absl::AbortedError(absl::StrFormat("%s aborted by rank %d: %s", segment_->shm_name(),
                                            h->abort_rank, h->abort_reason));
}

absl::Status ShmCommunicator::Begin(const char* op, uint64_t signature, Call* call) {
  if (failed_.load(std::memory_order_acquire)) {
    MutexLock lock(&mu_);
    return failure_;
  }
  if (segment_->header()->aborted.load(std::memory_order_acquire) != 0) {
    return Fail(SegmentAbortedError());
  }
  call->op = op;
  call->signature = signature;
  call->index = ++num_calls_;
  call->deadline = absl::Now() + timeout();
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Fail(absl::Status status) {
  {
    MutexLock lock(&mu_);
    if (!failed_.load(std::memory_order_relaxed)) {
      failure_ = status;
      failed_.store(true, std::memory_order_release);
    }
  }
  if (!absl::IsAborted(status)) {
    Abort(absl::StrCat("rank ", rank_, " failed: ", status.message()));
  }
  return status;
}

void ShmCommunicator::Abort(absl::string_view reason) {
  ShmHeader* h = segment_->header();
  uint32_t unclaimed = 0;
  if (h->abort_claim.compare_exchange_strong(unclaimed, 1, std::memory_order_seq_cst)) {
    h->abort_rank = rank_;
    const size_t n = std::min(reason.size(), sizeof(h->abort_reason) - 1);
    std::memcpy(h->abort_reason, reason.data(), n);
    h->abort_reason[n] = '\0';
    h->aborted.store(1, std::memory_order_seq_cst);
  }
  {
    // This rank fails at once even if another rank's abort is still being written.
    MutexLock lock(&mu_);
    if (!failed_.load(std::memory_order_relaxed)) {
      failure_ = absl::AbortedError(
          absl::StrCat(segment_->shm_name(), " aborted by rank ", rank_, ": ", reason));
      failed_.store(true, std::memory_order_release);
    }
  }
  for (int r = 0; r < world_size_; ++r) FutexWakeAll(&segment_->control(r)->phase);
}

void ShmCommunicator::SetTimeout(absl::Duration timeout) {
  timeout_ns_.store(absl::ToInt64Nanoseconds(timeout), std::memory_order_relaxed);
}

absl::Duration ShmCommunicator::timeout() const {
  return absl::Nanoseconds(timeout_ns_.load(std::memory_order_relaxed));
}

absl::Status ShmCommunicator::Phase(Call* call) {
  ShmRankControl* mine = segment_->control(rank_);
  // The signature slot alternates between synchronizing calls: a rank rewrites slot s
  // only two such calls later, after every peer has compared it.
  const bool first_phase = !call->synced;
  const int sig_slot = static_cast<int>(num_synced_calls_ & 1);
  if (first_phase) {
    ++num_synced_calls_;
    call->synced = true;
    mine->signature[sig_slot].store(call->signature, std::memory_order_relaxed);
  }
  ++phase_;
  mine->phase.store(phase_, std::memory_order_seq_cst);  // releases our slot writes
  // Pairs with the waiter's increment-then-recheck: either it sees the new phase or we
  // see it waiting (both seq_cst), so no wake-up is lost.
  if (mine->waiters.load(std::memory_order_seq_cst) != 0) FutexWakeAll(&mine->phase);
  for (int i = 1; i < world_size_; ++i) {
    const int peer = (rank_ + i) % world_size_;
    WEFT_RETURN_IF_ERROR(WaitForPeer(peer, phase_, *call));
    if (!first_phase) continue;
    const uint64_t theirs =
        segment_->control(peer)->signature[sig_slot].load(std::memory_order_relaxed);
    if (theirs != call->signature) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s rank %d: %s (call %d) does not match rank %d, which called %s%s",
          segment_->shm_name(), rank_, call->op, call->index, peer, OpName(theirs),
          OpName(theirs) == OpName(call->signature) ? " with other sizes" : ""));
    }
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::WaitForPeer(int peer, uint32_t target, const Call& call) {
  ShmRankControl* c = segment_->control(peer);
  for (int i = 0; i < kSpinIterations; ++i) {
    if (Reached(c->phase.load(std::memory_order_acquire), target)) return absl::OkStatus();
    CpuRelax();
  }
  for (int i = 0; i < kYieldIterations; ++i) {
    if (Reached(c->phase.load(std::memory_order_acquire), target)) return absl::OkStatus();
    sched_yield();
  }
  const ShmHeader* h = segment_->header();
  absl::Time next_check = absl::Now() + kLivenessInterval;
  while (true) {
    const uint32_t seen = c->phase.load(std::memory_order_acquire);
    if (Reached(seen, target)) return absl::OkStatus();
    if (h->aborted.load(std::memory_order_acquire) != 0) return SegmentAbortedError();
    const absl::Time now = absl::Now();
    if (now >= call.deadline) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "%s rank %d: %s (call %d) timed out after %s waiting for rank %d (pid %d) "
          "to reach phase %u; it is at %u",
          segment_->shm_name(), rank_, call.op, call.index,
          absl::FormatDuration(timeout()), peer, peer_pids_[peer], target, seen));
    }
    if (now >= next_check) {
      WEFT_RETURN_IF_ERROR(CheckPeer(peer, call));
      next_check = now + kLivenessInterval;
    }
    c->waiters.fetch_add(1, std::memory_order_seq_cst);
    if (c->phase.load(std::memory_order_seq_cst) == seen) {
      FutexWait(&c->phase, seen, std::min(call.deadline - now, kMaxSleepSlice));
    }
    c->waiters.fetch_sub(1, std::memory_order_seq_cst);
  }
}

absl::Status ShmCommunicator::CheckPeer(int peer, const Call& call) const {
  if (segment_->control(peer)->alive.load(std::memory_order_acquire) == 0) {
    return absl::UnavailableError(
        absl::StrFormat("%s rank %d: %s (call %d): rank %d closed its communicator",
                        segment_->shm_name(), rank_, call.op, call.index, peer));
  }
  if (PidCheckable(peer) && !ProcessAlive(peer_pids_[peer])) {
    return absl::UnavailableError(absl::StrFormat("%s rank %d: %s (call %d): rank %d (pid %d) died",
                                                  segment_->shm_name(), rank_, call.op,
                                                  call.index, peer, peer_pids_[peer]));
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::AllReduceSum(float* data, size_t count) {
  Call call;
  WEFT_RETURN_IF_ERROR(Begin("AllReduceSum", Signature(OpCode::kAllReduceSum, {count}), &call));
  if (count > 0 && data == nullptr) return absl::InvalidArgumentError("AllReduceSum: null data");
  for (size_t offset = 0; offset < count; offset += slot_floats_) {
    const size_t n = std::min(slot_floats_, count - offset);
    absl::Status status = AllReduceRound(data + offset, n, &call);
    if (!status.ok()) return Fail(std::move(status));
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::AllReduceRound(float* data, size_t count, Call* call) {
  const int parity = static_cast<int>(num_rounds_++ & 1);
  std::memcpy(segment_->slot(parity, rank_), data, count * sizeof(float));
  WEFT_RETURN_IF_ERROR(Phase(call));
  // Reduce-scatter: chunk rank_ of every slot, in rank order, into our own slot. Only we
  // read chunk rank_ of any slot in this phase, so writing it in place is safe.
  const float* srcs[kShmMaxWorldSize];
  for (int r = 0; r < world_size_; ++r) {
    srcs[r] = reinterpret_cast<const float*>(segment_->slot(parity, r));
  }
  const ChunkRange mine = ReduceChunkOf(count, world_size_, rank_);
  const float* chunk_srcs[kShmMaxWorldSize];
  for (int r = 0; r < world_size_; ++r) chunk_srcs[r] = srcs[r] + mine.begin;
  float* dst = reinterpret_cast<float*>(segment_->slot(parity, rank_)) + mine.begin;
  SumInRankOrder(chunk_srcs, world_size_, mine.end - mine.begin, dst);
  WEFT_RETURN_IF_ERROR(Phase(call));
  // All-gather of the reduced chunks.
  for (int q = 0; q < world_size_; ++q) {
    const ChunkRange chunk = ReduceChunkOf(count, world_size_, q);
    std::memcpy(data + chunk.begin, srcs[q] + chunk.begin,
                (chunk.end - chunk.begin) * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::AllGatherV(const float* in, size_t my_count,
                                         const std::vector<size_t>& counts, float* out) {
  Call call;
  WEFT_RETURN_IF_ERROR(Begin("AllGatherV", Signature(OpCode::kAllGatherV, counts.data(), counts.size()), &call));
  WEFT_RETURN_IF_ERROR(ValidateAllGatherV(rank_, world_size_, in, my_count, counts, out));
  std::vector<size_t> displs(world_size_, 0);
  for (int r = 1; r < world_size_; ++r) displs[r] = displs[r - 1] + counts[r - 1];
  const size_t max_count = *std::max_element(counts.begin(), counts.end());
  for (size_t offset = 0; offset < max_count; offset += slot_floats_) {
    absl::Status status = AllGatherRound(in, counts, displs, offset, slot_floats_, out, &call);
    if (!status.ok()) return Fail(std::move(status));
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::AllGatherRound(const float* in, const std::vector<size_t>& counts,
                                             const std::vector<size_t>& displs, size_t offset,
                                             size_t piece, float* out, Call* call) {
  const int parity = static_cast<int>(num_rounds_++ & 1);
  auto piece_of = [&](int r) {
    return counts[r] > offset ? std::min(piece, counts[r] - offset) : size_t{0};
  };
  const size_t mine = piece_of(rank_);
  if (mine > 0) std::memcpy(segment_->slot(parity, rank_), in + offset, mine * sizeof(float));
  WEFT_RETURN_IF_ERROR(Phase(call));
  for (int q = 0; q < world_size_; ++q) {
    const size_t n = piece_of(q);
    if (n == 0) continue;
    const float* src = q == rank_ ? in + offset
                                  : reinterpret_cast<const float*>(segment_->slot(parity, q));
    std::memcpy(out + displs[q] + offset, src, n * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Broadcast(void* data, size_t bytes, int root) {
  Call call;
  WEFT_RETURN_IF_ERROR(Begin(
      "Broadcast", Signature(OpCode::kBroadcast, {bytes, static_cast<uint64_t>(root)}), &call));
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("Broadcast: root ", root, " not in [0, ", world_size_, ")"));
  }
  if (bytes > 0 && data == nullptr) return absl::InvalidArgumentError("Broadcast: null data");
  char* p = static_cast<char*>(data);
  const size_t slot_bytes = segment_->slot_bytes();
  for (size_t offset = 0; offset < bytes; offset += slot_bytes) {
    const size_t n = std::min(slot_bytes, bytes - offset);
    const int parity = static_cast<int>(num_rounds_++ & 1);
    if (rank_ == root) std::memcpy(segment_->slot(parity, root), p + offset, n);
    absl::Status status = Phase(&call);
    if (!status.ok()) return Fail(std::move(status));
    if (rank_ != root) std::memcpy(p + offset, segment_->slot(parity, root), n);
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Barrier() {
  Call call;
  WEFT_RETURN_IF_ERROR(Begin("Barrier", Signature(OpCode::kBarrier, {}), &call));
  absl::Status status = Phase(&call);
  if (!status.ok()) return Fail(std::move(status));
  return absl::OkStatus();
}

}  // namespace weft

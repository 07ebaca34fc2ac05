#include "worker/comm/communicator.h"

#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace weft {

absl::Status Communicator::AllGather(const float* in, size_t count_per_rank, float* out) {
  const std::vector<size_t> counts(static_cast<size_t>(world_size()), count_per_rank);
  return AllGatherV(in, count_per_rank, counts, out);
}

absl::Status ValidateAllGatherV(int rank, int world_size, const float* in, size_t my_count,
                                const std::vector<size_t>& counts, const float* out) {
  if (counts.size() != static_cast<size_t>(world_size)) {
    return absl::InvalidArgumentError(absl::StrCat("AllGatherV: counts has ", counts.size(),
                                                   " entries, world_size is ", world_size));
  }
  if (counts[rank] != my_count) {
    return absl::InvalidArgumentError(absl::StrCat("AllGatherV: counts[", rank, "] = ",
                                                   counts[rank], " but my_count = ", my_count));
  }
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  if (total > 0 && out == nullptr) {
    return absl::InvalidArgumentError("AllGatherV: out is null");
  }
  if (my_count > 0 && in == nullptr) {
    return absl::InvalidArgumentError("AllGatherV: in is null");
  }
  if (my_count > 0 && total > 0) {
    const float* out_end = out + total;
    const float* in_end = in + my_count;
    if (in < out_end && out < in_end) {
      return absl::InvalidArgumentError("AllGatherV: in and out overlap");
    }
  }
  return absl::OkStatus();
}

LocalCommunicator::LocalCommunicator(absl::Duration timeout)
    : timeout_ns_(absl::ToInt64Nanoseconds(timeout)) {}

absl::Status LocalCommunicator::CheckNotAborted() const {
  if (!aborted_.load(std::memory_order_acquire)) return absl::OkStatus();
  MutexLock lock(&mu_);
  return absl::AbortedError(absl::StrCat("communicator aborted: ", abort_reason_));
}

absl::Status LocalCommunicator::AllReduceSum(float* data, size_t count) {
  return CheckNotAborted();
}

absl::Status LocalCommunicator::AllGatherV(const float* in, size_t my_count,
                                           const std::vector<size_t>& counts, float* out) {
  absl::Status status = CheckNotAborted();
  if (!status.ok()) return status;
  status = ValidateAllGatherV(0, 1, in, my_count, counts, out);
  if (!status.ok()) return status;
  if (my_count > 0) std::memcpy(out, in, my_count * sizeof(float));
  return absl::OkStatus();
}

absl::Status LocalCommunicator::Broadcast(void* data, size_t bytes, int root) {
  if (root != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Broadcast: root ", root,
                                                   " out of range for world_size 1"));
  }
  return CheckNotAborted();
}

absl::Status LocalCommunicator::Barrier() { return CheckNotAborted(); }

void LocalCommunicator::Abort(absl::string_view reason) {
  MutexLock lock(&mu_);
  if (aborted_.load(std::memory_order_relaxed)) return;
  abort_reason_ = std::string(reason);
  aborted_.store(true, std::memory_order_release);
}

void LocalCommunicator::SetTimeout(absl::Duration timeout) {
  timeout_ns_.store(absl::ToInt64Nanoseconds(timeout), std::memory_order_relaxed);
}

absl::Duration LocalCommunicator::timeout() const {
  return absl::Nanoseconds(timeout_ns_.load(std::memory_order_relaxed));
}

}  // namespace weft

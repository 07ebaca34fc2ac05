#include "worker/comm/nccl_communicator.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"

namespace weft {
namespace {

constexpr absl::Duration kPollInterval = absl::Microseconds(50);

absl::Status NcclError(ncclResult_t r, const char* what, ncclComm_t comm) {
  const char* last = comm != nullptr ? ncclGetLastError(comm) : "";
  return absl::InternalError(absl::StrCat(what, ": ", ncclGetErrorString(r),
                                          (last != nullptr && *last) ? " (" : "",
                                          last != nullptr ? last : "",
                                          (last != nullptr && *last) ? ")" : ""));
}

}  // namespace

absl::Status NcclCommunicatorOptions::Validate() const {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of world size ", world_size));
  }
  if (device < 0) return absl::InvalidArgumentError("device must be >= 0");
  if (timeout <= absl::ZeroDuration()) return absl::InvalidArgumentError("timeout must be > 0");
  return absl::OkStatus();
}

absl::StatusOr<std::string> NcclCommunicator::NewUniqueId() {
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) return NcclError(r, "ncclGetUniqueId", nullptr);
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    absl::string_view unique_id, const NcclCommunicatorOptions& options) {
  WEFT_RETURN_IF_ERROR(options.Validate());
  ncclUniqueId id;
  if (unique_id.size() != sizeof(id.internal)) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL unique id of ", unique_id.size(),
                                                   " bytes (want ", sizeof(id.internal),
                                                   "): rank 0 sent no comm_init?"));
  }
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  WEFT_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  cudaStream_t stream;
  WEFT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r =
      ncclCommInitRankConfig(&comm, options.world_size, id, options.rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (comm != nullptr) ncclCommAbort(comm);
    cudaStreamDestroy(stream);
    return NcclError(r, "ncclCommInitRankConfig", nullptr);
  }
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator(options, comm, stream));
  const absl::Time deadline = absl::Now() + options.timeout;
  absl::Status s = c->SettleAsync(deadline, "forming the NCCL group");
  if (!s.ok()) return s;
  WEFT_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&c->scratch_), sizeof(float)));
  return c;
}

NcclCommunicator::NcclCommunicator(const NcclCommunicatorOptions& options, ncclComm_t comm,
                                   cudaStream_t stream)
    : options_(options),
      comm_(comm),
      stream_(stream),
      timeout_ns_(absl::ToInt64Nanoseconds(options.timeout)) {}

NcclCommunicator::~NcclCommunicator() {
  bool failed;
  {
    MutexLock lock(&mu_);
    failed = !failure_.ok();
  }
  if (comm_ != nullptr) {
    if (failed || comm_aborted_) {
      if (!comm_aborted_) ncclCommAbort(comm_);
    } else {
      // Flush what was issued, but never wait forever for a peer that is gone.
      cudaStreamSynchronize(stream_);
      ncclResult_t r = ncclCommFinalize(comm_);
      const absl::Time deadline = absl::Now() + absl::Seconds(5);
      ncclResult_t state = r;
      while (r == ncclSuccess || r == ncclInProgress) {
        if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess || state != ncclInProgress) break;
        if (absl::Now() > deadline) break;
        absl::SleepFor(kPollInterval);
      }
      if (state == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
  }
  if (scratch_ != nullptr) cudaFree(scratch_);
  cudaStreamDestroy(stream_);
}

absl::Time NcclCommunicator::Deadline() const { return absl::Now() + timeout(); }

absl::Status NcclCommunicator::Fail(absl::Status status) {
  {
    MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = status;
    status = failure_;
  }
  if (!comm_aborted_ && comm_ != nullptr) {
    ncclCommAbort(comm_);  // the NCCL kernels still queued return
    comm_aborted_ = true;
  }
  return status;
}

absl::Status NcclCommunicator::CheckUsable() {
  if (abort_requested_.load(std::memory_order_acquire)) {
    std::string reason;
    {
      MutexLock lock(&mu_);
      reason = abort_reason_;
    }
    return Fail(absl::AbortedError(absl::StrCat("communicator aborted: ", reason)));
  }
  MutexLock lock(&mu_);
  return failure_;
}

absl::Status NcclCommunicator::SettleAsync(absl::Time deadline, const char* what) {
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) return Fail(NcclError(r, what, comm_));
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return Fail(NcclError(state, what, comm_));
    WEFT_RETURN_IF_ERROR(CheckUsable());
    if (absl::Now() > deadline) {
      return Fail(absl::DeadlineExceededError(absl::StrCat(
          what, ": rank ", options_.rank, " of ", options_.world_size,
          " still waiting for its peers at the deadline")));
    }
    absl::SleepFor(kPollInterval);
  }
}

absl::Status NcclCommunicator::NcclCall(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return absl::OkStatus();
  if (result == ncclInProgress) return SettleAsync(Deadline(), what);
  return Fail(NcclError(result, what, comm_));
}

absl::Status NcclCommunicator::Wait(cudaStream_t stream) {
  const absl::Time deadline = Deadline();
  while (true) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return CheckUsable();
    if (e != cudaErrorNotReady) {
      return Fail(kernels::cuda::CudaCall(e, "cudaStreamQuery", __FILE__, __LINE__));
    }
    WEFT_RETURN_IF_ERROR(CheckUsable());
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess ||
        (state != ncclSuccess && state != ncclInProgress)) {
      return Fail(absl::UnavailableError(absl::StrCat(
          "NCCL collective failed on rank ", options_.rank, ": ", ncclGetErrorString(state),
          " (a peer died or its connection broke)")));
    }
    if (absl::Now() > deadline) {
      return Fail(absl::DeadlineExceededError(absl::StrCat(
          "NCCL collective on rank ", options_.rank, " of ", options_.world_size,
          " did not complete within ", absl::FormatDuration(timeout()))));
    }
    absl::SleepFor(kPollInterval);
  }
}

absl::Status NcclCommunicator::AllReduceSumAsync(float* data, size_t count, cudaStream_t stream) {
  WEFT_RETURN_IF_ERROR(CheckUsable());
  if (count == 0) return absl::OkStatus();
  if (data == nullptr) return absl::InvalidArgumentError("AllReduceSum: data is null");
  return NcclCall(ncclAllReduce(data, data, count, ncclFloat32, ncclSum, comm_, stream),
                  "ncclAllReduce");
}

absl::Status NcclCommunicator::AllReduceSum(float* data, size_t count) {
  WEFT_RETURN_IF_ERROR(AllReduceSumAsync(data, count, stream_));
  return Wait(stream_);
}

absl::Status NcclCommunicator::AllGatherV(const float* in, size_t my_count,
                                          const std::vector<size_t>& counts, float* out) {
  WEFT_RETURN_IF_ERROR(CheckUsable());
  WEFT_RETURN_IF_ERROR(
      ValidateAllGatherV(options_.rank, options_.world_size, in, my_count, counts, out));
  // One broadcast per rank, fused into one NCCL group.
  WEFT_RETURN_IF_ERROR(NcclCall(ncclGroupStart(), "ncclGroupStart"));
  size_t offset = 0;
  ncclResult_t first_error = ncclSuccess;
  for (int r = 0; r < options_.world_size; ++r) {
    if (counts[r] > 0) {
      const void* send = r == options_.rank ? static_cast<const void*>(in) : nullptr;
      const ncclResult_t e =
          ncclBroadcast(send, out + offset, counts[r], ncclFloat32, r, comm_, stream_);
      if (e != ncclSuccess && e != ncclInProgress && first_error == ncclSuccess) first_error = e;
    }
    offset += counts[r];
  }
  const ncclResult_t end = ncclGroupEnd();
  if (first_error != ncclSuccess) return Fail(NcclError(first_error, "ncclBroadcast", comm_));
  WEFT_RETURN_IF_ERROR(NcclCall(end, "ncclGroupEnd"));
  return Wait(stream_);
}

absl::Status NcclCommunicator::Broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= options_.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("Broadcast: root ", root,
                                                   " out of range for world_size ",
                                                   options_.world_size));
  }
  WEFT_RETURN_IF_ERROR(CheckUsable());
  if (bytes == 0) return absl::OkStatus();
  WEFT_RETURN_IF_ERROR(
      NcclCall(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_), "ncclBroadcast"));
  return Wait(stream_);
}

absl::Status NcclCommunicator::Barrier() {
  WEFT_RETURN_IF_ERROR(CheckUsable());
  WEFT_RETURN_IF_ERROR(NcclCall(
      ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_), "barrier"));
  return Wait(stream_);
}

void NcclCommunicator::Abort(absl::string_view reason) {
  MutexLock lock(&mu_);
  if (abort_requested_.load(std::memory_order_relaxed)) return;
  abort_reason_ = std::string(reason);
  abort_requested_.store(true, std::memory_order_release);
}

void NcclCommunicator::SetTimeout(absl::Duration timeout) {
  timeout_ns_.store(absl::ToInt64Nanoseconds(timeout), std::memory_order_relaxed);
}

absl::Duration NcclCommunicator::timeout() const {
  return absl::Nanoseconds(timeout_ns_.load(std::memory_order_relaxed));
}

}  // namespace weft

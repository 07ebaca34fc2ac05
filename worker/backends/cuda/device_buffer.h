// RAII owners of CUDA memory for the CUDA backend: DeviceBuffer (cudaMalloc) and
// PinnedBuffer (cudaMallocHost, for asynchronous copies). Move-only; freeing is
// synchronous with respect to the device (cudaFree), so drop buffers only when no
// queued work uses them.
// Thread-safety: not synchronized; owned by the rank's step thread.
#ifndef WEFT_WORKER_BACKENDS_CUDA_DEVICE_BUFFER_H_
#define WEFT_WORKER_BACKENDS_CUDA_DEVICE_BUFFER_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "kernels/cuda/cuda_status.h"

namespace weft::cuda_backend {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { Reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Frees the old allocation (if any) and allocates `bytes` (contents undefined).
  absl::Status Allocate(size_t bytes) {
    Reset();
    if (bytes == 0) return absl::OkStatus();
    WEFT_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr_, bytes));
    bytes_ = bytes;
    return absl::OkStatus();
  }
  // Allocates only if the buffer is smaller; returns whether it reallocated.
  absl::Status Reserve(size_t bytes, bool* grew = nullptr) {
    if (grew != nullptr) *grew = false;
    if (bytes <= bytes_) return absl::OkStatus();
    if (grew != nullptr) *grew = true;
    return Allocate(bytes);
  }
  void Reset() {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { Reset(); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  absl::Status Reserve(size_t bytes) {
    if (bytes <= bytes_) return absl::OkStatus();
    Reset();
    WEFT_CUDA_RETURN_IF_ERROR(cudaMallocHost(&ptr_, bytes));
    bytes_ = bytes;
    return absl::OkStatus();
  }
  void Reset() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace weft::cuda_backend

#endif  // WEFT_WORKER_BACKENDS_CUDA_DEVICE_BUFFER_H_

// Test helpers for the CUDA kernels: skip without a device, RAII device arrays, and
// comparisons with a tolerance.
//
//   WEFT_SKIP_WITHOUT_CUDA();            // first line of every GPU test
//   DeviceArray<float> x(host_vector);   // cudaMalloc + upload; freed at scope end
//   std::vector<float> y = out.ToHost();
// A failing CUDA call inside a helper is a gtest failure (ADD_FAILURE), not a crash.
// Ownership: a DeviceArray owns its allocation. Thread-safety: test code, one thread.
#ifndef WEFT_KERNELS_CUDA_TESTING_CUDA_TEST_UTIL_H_
#define WEFT_KERNELS_CUDA_TESTING_CUDA_TEST_UTIL_H_

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_status.h"

// Skips (counted as skipped by tools/count_tests.py) when no CUDA device is present.
#define WEFT_SKIP_WITHOUT_CUDA()                                              \
  do {                                                                        \
    if (::weft::kernels::cuda::CudaDeviceCount() == 0) {                      \
      GTEST_SKIP() << "no CUDA device ("                                      \
                   << ::weft::kernels::cuda::CudaNoDeviceReason() << ")";     \
    }                                                                         \
  } while (0)

#define WEFT_EXPECT_CUDA_OK(expr)                                              \
  do {                                                                        \
    const cudaError_t weft_e_ = (expr);                                       \
    EXPECT_EQ(weft_e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(weft_e_); \
  } while (0)

namespace weft::kernels::cuda::testing {

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    if (n_ > 0) WEFT_EXPECT_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&p_), n_ * sizeof(T)));
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { Upload(host); }
  ~DeviceArray() {
    if (p_ != nullptr) cudaFree(p_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

  void Upload(const std::vector<T>& host) {
    EXPECT_EQ(host.size(), n_);
    if (n_ > 0) {
      WEFT_EXPECT_CUDA_OK(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
    }
  }
  void FillBytes(int byte) {
    if (n_ > 0) WEFT_EXPECT_CUDA_OK(cudaMemset(p_, byte, n_ * sizeof(T)));
  }
  // Waits for the device, then copies everything back.
  std::vector<T> ToHost() const {
    std::vector<T> host(n_);
    WEFT_EXPECT_CUDA_OK(cudaDeviceSynchronize());
    if (n_ > 0) {
      WEFT_EXPECT_CUDA_OK(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    }
    return host;
  }

 private:
  size_t n_ = 0;
  T* p_ = nullptr;
};

// Largest |a[i] - b[i]| / (atol + rtol*|b[i]|) over i; <= 1 means "within tolerance".
// NaN anywhere gives infinity.
inline double WorstError(const std::vector<float>& a, const std::vector<float>& b, double atol,
                         double rtol) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    const double e = std::fabs(double{a[i]} - b[i]) / (atol + rtol * std::fabs(double{b[i]}));
    if (e > worst) worst = e;
  }
  return worst;
}

}  // namespace weft::kernels::cuda::testing

#endif  // WEFT_KERNELS_CUDA_TESTING_CUDA_TEST_UTIL_H_

// What the CUDA kernel benchmarks share (paged_attention_benchmark,
// quant_gemm_benchmark): the copy roofline they report shares of, a CUDA call that
// skips the benchmark with its error, and a device allocation freed at scope exit.
// Thread-safety: one benchmark thread.
#ifndef WEFT_KERNELS_CUDA_TESTING_BENCH_UTIL_H_
#define WEFT_KERNELS_CUDA_TESTING_BENCH_UTIL_H_

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <string>

namespace weft::kernels::cuda::testing {

// The card's copy bandwidth in GB/s: WEFT_ROOFLINE_GBPS, else 3000 (an H100's).
inline double RooflineGbps() {
  const char* env = std::getenv("WEFT_ROOFLINE_GBPS");
  return env != nullptr && std::atof(env) > 0 ? std::atof(env) : 3000.0;
}

// A device allocation freed at scope exit.
struct Device {
  void* p = nullptr;
  Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device() {
    if (p != nullptr) cudaFree(p);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

}  // namespace weft::kernels::cuda::testing

// Inside a benchmark function (a benchmark::State named `state`): a failed CUDA call
// skips the benchmark with the call and its error, and returns.
#define BENCH_CUDA(expr)                                                                   \
  do {                                                                                     \
    const cudaError_t e_ = (expr);                                                         \
    if (e_ != cudaSuccess) {                                                               \
      state.SkipWithError((std::string(#expr) + ": " + cudaGetErrorString(e_)).c_str()); \
      return;                                                                              \
    }                                                                                      \
  } while (0)

#endif  // WEFT_KERNELS_CUDA_TESTING_BENCH_UTIL_H_

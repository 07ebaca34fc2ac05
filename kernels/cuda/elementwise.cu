// Kernels of elementwise.h.
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/elementwise.h"
#if !defined(WEFT_CUDA_HOST_EMULATION)
#include "kernels/cuda/launch.cuh"
#endif

namespace weft::kernels::cuda {
namespace {

constexpr int kNormThreads = kRmsNormThreads;
constexpr int kRopeThreads = 128;
constexpr int kMaxRopeHalf = 512;  // rot_dim <= 1024
constexpr int kEltThreads = 256;

__global__ void __launch_bounds__(kNormThreads) RmsNormKernel(RmsNormArgs a) {
  __shared__ float scratch[32];
  PdlBegin();  // launch.h
  const int64_t i = blockIdx.x;
  const int64_t r = a.rows != nullptr ? a.rows[i] : i;
  float* x = a.x + r * a.x_stride;
  const float* delta = a.delta != nullptr ? a.delta + i * a.delta_stride : nullptr;
  if (delta != nullptr) {
    // Post-norm of the delta row first, if any; then x += delta, each thread its own
    // columns (the ones RmsNormRowFactor below gives it back).
    const float inv_d =
        a.delta_weight != nullptr ? RmsNormRowFactor(delta, a.dim, a.eps, scratch) : 1.0f;
    for (int64_t c = threadIdx.x; c < a.dim; c += blockDim.x) {
      const float dv = a.delta_weight != nullptr
                           ? __fmul_rn(__fmul_rn(delta[c], inv_d), a.delta_weight[c])
                           : delta[c];
      x[c] = __fadd_rn(x[c], dv);
    }
  }
  // The factor every normed GEMV computes the same way (device_utils.cuh).
  const float inv = RmsNormRowFactor(x, a.dim, a.eps, scratch);
  for (int64_t c = threadIdx.x; c < a.dim; c += blockDim.x) {
    // Each thread reads back only the values it stored itself.
    StoreAct(a.out, i * a.out_stride + c, __fmul_rn(__fmul_rn(x[c], inv), a.weight[c]),
             a.out_dtype);
  }
}

__global__ void __launch_bounds__(kRopeThreads)
    RopeKernel(RopeStyle style, const int32_t* __restrict__ positions,
               const double* __restrict__ inv_freq, int32_t rot_dim, int32_t head_dim,
               RopeTarget a, RopeTarget b) {
  __shared__ float cos_s[kMaxRopeHalf];
  __shared__ float sin_s[kMaxRopeHalf];
  const int64_t t = blockIdx.x;
  const int32_t half = rot_dim / 2;
  for (int32_t i = threadIdx.x; i < half; i += blockDim.x) {
    RopeCosSin(positions[t], inv_freq[i], &cos_s[i], &sin_s[i]);
  }
  __syncthreads();
  // Distance between the two members of a pair, and between consecutive pairs.
  const int32_t mate = style == RopeStyle::kNormal ? 1 : half;
  const int32_t step = style == RopeStyle::kNormal ? 2 : 1;
  const int32_t total = (a.num_heads + b.num_heads) * half;
  for (int32_t j = threadIdx.x; j < total; j += blockDim.x) {
    const int32_t head = j / half;
    const int32_t i = j % half;
    float* row = head < a.num_heads ? a.x + t * a.stride + int64_t{head} * head_dim
                                    : b.x + t * b.stride + int64_t{head - a.num_heads} * head_dim;
    float* p = row + i * step;
    const float x0 = p[0];
    const float x1 = p[mate];
    const float c = cos_s[i], s = sin_s[i];
    p[0] = RopeFirst(x0, x1, c, s);
    p[mate] = RopeSecond(x0, x1, c, s);
  }
}

// One warp per (token, head) row of head_dim values.
constexpr int kHeadNormWarps = 8;
__global__ void __launch_bounds__(kHeadNormWarps * 32)
    HeadRmsNormKernel(float* x, int64_t stride, int64_t num_rows, int32_t num_heads,
                      int32_t head_dim, const float* __restrict__ weight, float eps) {
  const int64_t r = int64_t{blockIdx.x} * kHeadNormWarps + threadIdx.x / 32;
  if (r >= num_rows) return;  // a whole warp leaves together
  const int lane = threadIdx.x % 32;
  float* row = x + (r / num_heads) * stride + (r % num_heads) * int64_t{head_dim};
  float ss = 0.0f;
  for (int c = lane; c < head_dim; c += 32) ss = __fadd_rn(ss, __fmul_rn(row[c], row[c]));
  const float inv = RmsFactor(WarpSum(ss), head_dim, eps);
  for (int c = lane; c < head_dim; c += 32) {
    row[c] = __fmul_rn(__fmul_rn(row[c], inv), weight[c]);
  }
}

__global__ void __launch_bounds__(kEltThreads)
    AddRowBiasKernel(float* x, int64_t stride, int64_t num_rows, const float* __restrict__ bias,
                     int64_t width) {
  const int64_t total = num_rows * width;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    float* p = x + (e / width) * stride + e % width;
    *p = __fadd_rn(*p, bias[e % width]);
  }
}

__global__ void __launch_bounds__(kEltThreads)
    SoftCapKernel(float* x, int64_t stride, int64_t num_rows, int64_t width, float cap) {
  const int64_t total = num_rows * width;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    float* p = x + (e / width) * stride + e % width;
    *p = __fmul_rn(cap, tanhf(__fdiv_rn(*p, cap)));
  }
}

enum class GatedAct { kSilu, kGeluTanh };

template <GatedAct kAct>
__global__ void __launch_bounds__(kEltThreads)
    GatedKernel(const float* __restrict__ gate, const float* __restrict__ up, int64_t in_stride,
                int64_t num_tokens, int64_t width, void* out, ActDtype out_dtype,
                int64_t out_stride) {
  const int64_t total = num_tokens * width;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = e / width, i = e % width;
    const float g = gate[t * in_stride + i];
    const float u = up[t * in_stride + i];
    float y;
    if constexpr (kAct == GatedAct::kSilu) {
      y = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
    } else {  // GeluTanhGlu's expression, operation by operation
      constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
      const float inner = __fmul_rn(__fmul_rn(kSqrt2OverPi, g),
                                    __fadd_rn(1.0f, __fmul_rn(__fmul_rn(0.044715f, g), g)));
      y = __fmul_rn(__fmul_rn(__fmul_rn(0.5f, g), __fadd_rn(1.0f, tanhf(inner))), u);
    }
    StoreAct(out, t * out_stride + i, y, out_dtype);
  }
}

template <typename T>
__global__ void __launch_bounds__(kEltThreads)
    EmbeddingKernel(const T* __restrict__ table, int64_t vocab, int64_t dim,
                    const int32_t* __restrict__ ids, float* out, int64_t out_stride,
                    float scale) {
  PdlBegin();  // launch.h
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  const bool valid = id >= 0 && id < vocab;
  const T* row = table + (valid ? int64_t{id} * dim : 0);
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    const float v = valid ? ToFloat(row[c]) : 0.0f;
    out[t * out_stride + c] = scale == 1.0f ? v : __fmul_rn(v, scale);
  }
}

#if !defined(WEFT_CUDA_HOST_EMULATION)
unsigned GridFor(int64_t total) {
  const int64_t blocks = (total + kEltThreads - 1) / kEltThreads;
  return static_cast<unsigned>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}
#endif

}  // namespace

#if !defined(WEFT_CUDA_HOST_EMULATION)  // launch code (not in the host emulation build)
cudaError_t RmsNorm(const RmsNormArgs& args, cudaStream_t stream) {
  if (args.num_rows < 0 || args.num_rows > 0x7fffffff || args.dim <= 0 ||
      (args.delta != nullptr && args.rows != nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (args.num_rows == 0) return cudaSuccess;
  return LaunchKernel(RmsNormKernel, dim3(static_cast<unsigned>(args.num_rows)),
                      dim3(kNormThreads), 0, stream, args);
}

cudaError_t ApplyRope(RopeStyle style, const int32_t* positions, const double* inv_freq,
                      int32_t rot_dim, int32_t head_dim, int64_t num_tokens,
                      const RopeTarget& a, const RopeTarget& b, cudaStream_t stream) {
  if (rot_dim <= 0 || rot_dim % 2 != 0 || rot_dim > head_dim || rot_dim / 2 > kMaxRopeHalf ||
      num_tokens < 0 || num_tokens > 0x7fffffff || a.num_heads < 0 || b.num_heads < 0) {
    return cudaErrorInvalidValue;
  }
  if (num_tokens == 0 || a.num_heads + b.num_heads == 0) return cudaSuccess;
  RopeKernel<<<static_cast<unsigned>(num_tokens), kRopeThreads, 0, stream>>>(
      style, positions, inv_freq, rot_dim, head_dim, a, b);
  return cudaGetLastError();
}

cudaError_t SwiGlu(const float* gate, const float* up, int64_t in_stride, int64_t num_tokens,
                   int64_t width, void* out, ActDtype out_dtype, int64_t out_stride,
                   cudaStream_t stream) {
  if (num_tokens < 0 || width < 0) return cudaErrorInvalidValue;
  if (num_tokens == 0 || width == 0) return cudaSuccess;
  GatedKernel<GatedAct::kSilu><<<GridFor(num_tokens * width), kEltThreads, 0, stream>>>(
      gate, up, in_stride, num_tokens, width, out, out_dtype, out_stride);
  return cudaGetLastError();
}

cudaError_t GeGlu(const float* gate, const float* up, int64_t in_stride, int64_t num_tokens,
                  int64_t width, void* out, ActDtype out_dtype, int64_t out_stride,
                  cudaStream_t stream) {
  if (num_tokens < 0 || width < 0) return cudaErrorInvalidValue;
  if (num_tokens == 0 || width == 0) return cudaSuccess;
  GatedKernel<GatedAct::kGeluTanh><<<GridFor(num_tokens * width), kEltThreads, 0, stream>>>(
      gate, up, in_stride, num_tokens, width, out, out_dtype, out_stride);
  return cudaGetLastError();
}

cudaError_t HeadRmsNorm(float* x, int64_t stride, int64_t num_tokens, int32_t num_heads,
                        int32_t head_dim, const float* weight, float eps, cudaStream_t stream) {
  if (num_tokens < 0 || num_heads < 0 || head_dim <= 0) return cudaErrorInvalidValue;
  const int64_t rows = num_tokens * num_heads;
  if (rows == 0) return cudaSuccess;
  const int64_t blocks = (rows + kHeadNormWarps - 1) / kHeadNormWarps;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  HeadRmsNormKernel<<<static_cast<unsigned>(blocks), kHeadNormWarps * 32, 0, stream>>>(
      x, stride, rows, num_heads, head_dim, weight, eps);
  return cudaGetLastError();
}

cudaError_t AddRowBias(float* x, int64_t stride, int64_t num_rows, const float* bias,
                       int64_t width, cudaStream_t stream) {
  if (num_rows < 0 || width < 0) return cudaErrorInvalidValue;
  if (num_rows == 0 || width == 0) return cudaSuccess;
  AddRowBiasKernel<<<GridFor(num_rows * width), kEltThreads, 0, stream>>>(x, stride, num_rows,
                                                                           bias, width);
  return cudaGetLastError();
}

cudaError_t SoftCap(float* x, int64_t stride, int64_t num_rows, int64_t width, float cap,
                    cudaStream_t stream) {
  if (num_rows < 0 || width < 0 || !(cap > 0.0f)) return cudaErrorInvalidValue;
  if (num_rows == 0 || width == 0) return cudaSuccess;
  SoftCapKernel<<<GridFor(num_rows * width), kEltThreads, 0, stream>>>(x, stride, num_rows,
                                                                       width, cap);
  return cudaGetLastError();
}

cudaError_t EmbeddingGather(const void* table, WeightDtype dtype, int64_t vocab, int64_t dim,
                            const int32_t* ids, int64_t num_tokens, float* out,
                            int64_t out_stride, cudaStream_t stream, float scale) {
  if (num_tokens < 0 || num_tokens > 0x7fffffff || dim <= 0) return cudaErrorInvalidValue;
  if (num_tokens == 0) return cudaSuccess;
  const unsigned grid = static_cast<unsigned>(num_tokens);
  if (dtype == WeightDtype::kBf16) {
    return LaunchKernel(EmbeddingKernel<__nv_bfloat16>, dim3(grid), dim3(kEltThreads), 0,
                        stream, static_cast<const __nv_bfloat16*>(table), vocab, dim, ids, out,
                        out_stride, scale);
  }
  return LaunchKernel(EmbeddingKernel<__half>, dim3(grid), dim3(kEltThreads), 0, stream,
                      static_cast<const __half*>(table), vocab, dim, ids, out, out_stride, scale);
}

#endif  // !WEFT_CUDA_HOST_EMULATION

}  // namespace weft::kernels::cuda

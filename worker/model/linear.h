// Linear: one weight matrix of the model together with the kernel that multiplies by it.
//
// y[i][j] = sum_c x[i][c] * W[j][c]: W has out_features() rows of in_features() weights,
// stored as in the GGUF (kernels/cpu/quant_matmul.h describes the layout; the bytes stay
// in the mmap'd file, dequantized block by block on the fly). The kernel is chosen once,
// when the Linear is made, so a weight always computes the same way (batch invariance);
// a faster kernel family (int8 VNNI/AMX, repacked layouts, a CUDA GEMM) plugs in here as
// another kernels::MatmulImpl, possibly owning a repacked copy of the weights.
//
// Tensor parallelism: RowSlice() keeps a range of output features (column-parallel
// Q/K/V/gate/up) and ColSlice() a range of input features (row-parallel O/down) without
// copying: they only move the data pointer and keep the row stride.
// Ownership: does not own the weight bytes (the GgufFile must outlive it).
// Thread-safety: immutable; Compute() may run concurrently on disjoint column ranges.
#ifndef WEFT_WORKER_MODEL_LINEAR_H_
#define WEFT_WORKER_MODEL_LINEAR_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/gguf.h"
#include "kernels/cpu/quant_matmul.h"

namespace weft {

// Which kernels the model uses: kAuto = the fastest this CPU supports for each weight,
// falling back to the reference where needed; kReference = the fp32 reference kernels
// (what the accuracy tests use); kAvx512 = the AVX-512 kernels (an error if the CPU
// lacks them).
enum class KernelChoice {
  kAuto,
  kReference,
  kAvx512,
};

absl::StatusOr<KernelChoice> ParseKernelChoice(absl::string_view name);
const char* KernelChoiceName(KernelChoice choice);

class Linear {
 public:
  Linear() = default;

  // Wraps GGUF tensor `t`, which must be 2-D with ne = {in_features, out_features}.
  static absl::StatusOr<Linear> FromTensor(const GgufTensor& t, int64_t in_features,
                                           int64_t out_features, KernelChoice choice);

  int64_t in_features() const { return matrix_.k; }
  int64_t out_features() const { return matrix_.n; }
  GgmlType type() const { return matrix_.type; }
  kernels::MatmulImpl impl() const { return impl_; }
  const kernels::QuantMatrix& matrix() const { return matrix_; }

  // Output features [begin, end) (a column-parallel shard).
  absl::StatusOr<Linear> RowSlice(int64_t begin, int64_t end) const;
  // Input features [begin, end), block-aligned (a row-parallel shard).
  absl::StatusOr<Linear> ColSlice(int64_t begin, int64_t end) const;

  // y[i][j] for i < m, j in [n_begin, n_end); x rows ldx floats apart, y rows ldy.
  void Compute(const float* x, int64_t ldx, int64_t m, float* y, int64_t ldy, int64_t n_begin,
               int64_t n_end) const {
    kernels::Matmul(impl_, matrix_, x, ldx, m, y, ldy, n_begin, n_end);
  }

 private:
  kernels::QuantMatrix matrix_;
  kernels::MatmulImpl impl_ = kernels::MatmulImpl::kReference;
  KernelChoice choice_ = KernelChoice::kReference;
  std::string name_;
};

}  // namespace weft

#endif  // WEFT_WORKER_MODEL_LINEAR_H_

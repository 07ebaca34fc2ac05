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
// Q/K/V/gate/up) and ColSlice() a range of input features (row-parallel O/down): views
// of the GGUF rows (moved data pointer, same row stride), packed again if packed.
// Ownership: borrows the GGUF bytes (the GgufFile must outlive it); shares ownership of
// its packed copy, if any, with the Linears copied from it.
// Thread-safety: immutable; Compute() may run concurrently on disjoint column ranges.
#ifndef WEFT_WORKER_MODEL_LINEAR_H_
#define WEFT_WORKER_MODEL_LINEAR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf.h"
#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/quant_matmul.h"

namespace weft {

// Which kernels the model uses:
//   kAuto      the fastest this CPU supports for each weight: kPacked where it applies,
//              else kAvx512, else the reference;
//   kReference the fp32 reference kernels (exact dequantized weights; what the accuracy
//              tests use);
//   kAvx512    AVX-512 on the GGUF's row-major bytes (kernels/cpu/quant_matmul.h);
//   kPacked    Q4_0/Q4_1/Q8_0 repacked into 16-row panels at load time
//              (kernels/cpu/packed_matmul.h; other types use kAvx512).
// Asking for kAvx512 or kPacked on a CPU without AVX-512 is an error.
enum class KernelChoice {
  kAuto,
  kReference,
  kAvx512,
  kPacked,
};

absl::StatusOr<KernelChoice> ParseKernelChoice(absl::string_view name);
const char* KernelChoiceName(KernelChoice choice);

// Memory for packed weights: 2 MB-aligned chunks of anonymous memory with transparent
// huge pages requested, shared by the Linears of one model so that small matrices are
// huge-page backed too (fewer TLB misses while streaming the weights). Thread-safety:
// Allocate() from one thread (model loading).
class PackedArena {
 public:
  PackedArena() = default;
  ~PackedArena();
  PackedArena(const PackedArena&) = delete;
  PackedArena& operator=(const PackedArena&) = delete;

  // 64-byte aligned, valid while the arena lives; nullptr if memory is exhausted.
  uint8_t* Allocate(size_t bytes);
  size_t bytes_used() const { return used_total_; }

 private:
  static constexpr size_t kChunkBytes = size_t{64} << 20;
  struct Chunk {
    void* map = nullptr;
    size_t map_bytes = 0;
    uint8_t* base = nullptr;
    size_t size = 0;
    size_t used = 0;
  };
  std::vector<Chunk> chunks_;
  size_t used_total_ = 0;
};

class Linear {
 public:
  Linear() = default;

  // Wraps GGUF tensor `t`, which must be 2-D with ne = {in_features, out_features}.
  // A packed copy, if the kernel wants one, goes into `arena` (or its own mapping when
  // arena is null); the Linear keeps the arena alive.
  static absl::StatusOr<Linear> FromTensor(const GgufTensor& t, int64_t in_features,
                                           int64_t out_features, KernelChoice choice,
                                           std::shared_ptr<PackedArena> arena = nullptr);

  int64_t in_features() const { return matrix_.k; }
  int64_t out_features() const { return matrix_.n; }
  GgmlType type() const { return matrix_.type; }
  bool packed() const { return packed_ != nullptr; }
  // "reference", "avx512" or "packed".
  const char* kernel_name() const;
  // The GGUF view (also for packed weights).
  const kernels::QuantMatrix& matrix() const { return matrix_; }

  // The same weights with other kernels (packs or drops the packed copy).
  absl::StatusOr<Linear> WithKernels(KernelChoice choice) const;
  // Output features [begin, end) (a column-parallel shard).
  absl::StatusOr<Linear> RowSlice(int64_t begin, int64_t end) const;
  // Input features [begin, end), block-aligned (a row-parallel shard).
  absl::StatusOr<Linear> ColSlice(int64_t begin, int64_t end) const;

  // y[i][j] for i < m, j in [n_begin, n_end); x rows ldx floats apart, y rows ldy.
  void Compute(const float* x, int64_t ldx, int64_t m, float* y, int64_t ldy, int64_t n_begin,
               int64_t n_end) const {
    if (packed_ != nullptr) {
      kernels::PackedMatmul(packed_view_, x, ldx, m, y, ldy, n_begin, n_end);
    } else {
      kernels::Matmul(impl_, matrix_, x, ldx, m, y, ldy, n_begin, n_end);
    }
  }

 private:
  // Chooses the kernel for `matrix` and packs it if that kernel wants it.
  static absl::StatusOr<Linear> Prepare(const kernels::QuantMatrix& matrix,
                                        const std::string& name, KernelChoice choice,
                                        std::shared_ptr<PackedArena> arena);

  kernels::QuantMatrix matrix_;
  kernels::MatmulImpl impl_ = kernels::MatmulImpl::kReference;
  KernelChoice choice_ = KernelChoice::kReference;
  std::string name_;
  std::shared_ptr<PackedArena> arena_;   // where packed copies go (may be null)
  std::shared_ptr<const void> packed_;   // keeps the packed bytes alive; null if unpacked
  kernels::PackedMatrix packed_view_;
};

}  // namespace weft

#endif  // WEFT_WORKER_MODEL_LINEAR_H_

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
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf.h"
#include "kernels/cpu/bf16_matmul.h"
#include "kernels/cpu/int8_matmul.h"
#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/quant_matmul.h"

namespace weft {

// Which kernels the model uses (--kernels):
//   kAuto        the fastest this CPU runs: kAmx, else kAvx512Vnni, else kAvx2, else
//                kReference;
//   kReference   the fp32 reference kernels (exact dequantized weights; what the numpy
//                accuracy test uses);
//   kAvx512Vnni  int8: activations quantized in blocks of 32, Q4_0/Q4_1/Q8_0 weights
//                repacked for `vpdpbusd` (kernels/cpu/int8_matmul.h); Q5_0/Q5_1/Q4_K/
//                Q5_K/Q6_K repacked for the int8 AVX2 kernel, which has no AVX-512 twin
//                (the same bits; kernel_name() says "avx2" for those);
//   kAvx2        the same int8 arithmetic (bitwise) with AVX2 instructions;
//   kAmx         bf16 on AMX tiles: activations rounded to bf16, Q4_0/Q4_1/Q8_0 weights
//                dequantized to bf16 per call (kernels/cpu/bf16_matmul.h), every batch
//                size on the tiles; the other quantized types take the int8 kernels
//                (their inputs quantized to int8: a model mixes InputForms);
//   kAvx512      fp32 AVX-512, dequantizing the GGUF's row-major bytes on the fly
//                (kernels/cpu/quant_matmul.h);
//   kPacked      fp32 AVX-512 on Q4_0/Q4_1/Q8_0 repacked into 16-row panels
//                (kernels/cpu/packed_matmul.h).
// Weights of other types (F32, F16, BF16) use the fp32 kernels of the path's ISA; on the
// fp32 AVX-512 paths, types with no AVX-512 code (Q5_0/Q5_1/Q4_K/Q5_K/Q6_K) use the
// reference kernels (exact). kernel_name() names what really runs.
// Asking for a path this CPU cannot run is FailedPrecondition.
enum class KernelChoice {
  kAuto,
  kReference,
  kAvx512,
  kPacked,
  kAvx512Vnni,
  kAvx2,
  kAmx,
};

// kAuto resolved for this CPU (other choices are returned as they are).
KernelChoice ResolveKernelChoice(KernelChoice choice);

// The kernels of the LM head under `choice`. The head multiplies one row per sequence
// that wants logits (m = 1 for a single stream), where the AMX path's per-call
// dequantization costs most, so under kAmx it runs the int8 kernels (kAvx512Vnni: VNNI,
// AMX int8 tiles for whole 16-row tiles). The choice is fixed per model, so the head's
// arithmetic never depends on the batch. Other choices are returned as they are.
KernelChoice LmHeadKernelChoice(KernelChoice choice);

// Every concrete choice (not kAuto) this CPU can run, reference first.
std::vector<KernelChoice> SupportedKernelChoices();
// Whether the choice runs int8 kernels (judged by the statistical accuracy criteria,
// not by closeness to exact arithmetic).
bool IsInt8KernelChoice(KernelChoice choice);
// Whether the choice rounds activations (int8 or bf16): judged by the statistical
// accuracy criteria (llama_accuracy_test), not by closeness to exact arithmetic.
bool RoundsActivations(KernelChoice choice);

// What a Linear multiplies: fp32 rows, and their rounded forms when the Linear wants one.
struct LinearInput {
  const float* x = nullptr;
  int64_t ldx = 0;
  const kernels::Q8Rows* q8 = nullptr;      // required when the Linear's wants_q8()
  const kernels::Bf16Rows* bf16 = nullptr;  // required when the Linear's wants_bf16()
};

// Which rounded forms of an input some Linear wants.
struct InputForms {
  bool q8 = false;
  bool bf16 = false;
};

// One matmul input's rounded forms (kernels::Q8Rows, kernels::Bf16Rows) with their
// storage; makes only the forms it was sized for. Grows, never shrinks.
// Thread-safety: plain data; Convert() on disjoint row ranges may run concurrently once
// Resize() is done.
class ActivationBuffer {
 public:
  void Resize(InputForms forms, int64_t rows, int64_t k);
  // Rows [row_begin, row_end) of x (ldx floats apart) into every form.
  void Convert(const float* x, int64_t ldx, int64_t row_begin, int64_t row_end);
  // x's rows with this buffer's forms (made by Convert from the same x).
  LinearInput Input(const float* x, int64_t ldx) const;

 private:
  InputForms forms_;
  std::vector<int8_t> q_;
  std::vector<float> d_, ds_;
  std::vector<int32_t> qsum_;
  kernels::Q8Rows q8_;
  std::vector<uint16_t> bf16_data_;
  kernels::Bf16Rows bf16_;
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
  // Holds a repacked copy (fp32 or int8 panels); the GGUF bytes are then only a view.
  bool packed() const { return packed_ != nullptr; }
  // Multiplies int8-quantized activations (LinearInput::q8 must be set).
  bool wants_q8() const { return int8_isa_.has_value(); }
  // Multiplies bf16 activations on AMX (LinearInput::bf16 must be set).
  bool wants_bf16() const { return amx_bf16_; }
  InputForms input_forms() const { return {wants_q8(), wants_bf16()}; }
  // What runs: "reference", "avx512", "packed", "avx512vnni", "amx_int8", "avx2",
  // "scalar" or "amx_bf16" (the int8 ISA after Int8IsaFor, e.g. "avx2" for a Q4_K
  // matrix under --kernels=avx512vnni).
  const char* kernel_name() const;
  // The GGUF view (also for packed weights).
  const kernels::QuantMatrix& matrix() const { return matrix_; }

  // The same weights with other kernels (packs or drops the packed copy).
  absl::StatusOr<Linear> WithKernels(KernelChoice choice) const;
  // Output features [begin, end) (a column-parallel shard).
  absl::StatusOr<Linear> RowSlice(int64_t begin, int64_t end) const;
  // Input features [begin, end), block-aligned (a row-parallel shard): K-quants on
  // multiples of 256, else InvalidArgument naming the tensor and its type.
  absl::StatusOr<Linear> ColSlice(int64_t begin, int64_t end) const;

  // y[i][j] for i < m, j in [n_begin, n_end); y rows ldy floats apart.
  void Compute(const LinearInput& in, int64_t m, float* y, int64_t ldy, int64_t n_begin,
               int64_t n_end) const {
    if (amx_bf16_) {
      kernels::Bf16Matmul(bf16_view_, *in.bf16, m, y, ldy, n_begin, n_end);
    } else if (int8_isa_.has_value()) {
      kernels::Int8Matmul(*int8_isa_, int8_view_, *in.q8, m, y, ldy, n_begin, n_end);
    } else if (packed_ != nullptr) {
      kernels::PackedMatmul(packed_view_, in.x, in.ldx, m, y, ldy, n_begin, n_end);
    } else {
      kernels::Matmul(impl_, matrix_, in.x, in.ldx, m, y, ldy, n_begin, n_end);
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
  kernels::PackedMatrix packed_view_;    // fp32 panels
  std::optional<kernels::Int8Isa> int8_isa_;
  kernels::Int8PackedMatrix int8_view_;  // int8 panels
  bool amx_bf16_ = false;
  kernels::Bf16PackedMatrix bf16_view_;  // bf16 AMX panels
};

}  // namespace weft

#endif  // WEFT_WORKER_MODEL_LINEAR_H_

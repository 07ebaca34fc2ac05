#include "worker/model/linear.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "kernels/cpu/cpu_features.h"

namespace weft {

PackedArena::~PackedArena() {
  for (const Chunk& c : chunks_) munmap(c.map, c.map_bytes);
}

uint8_t* PackedArena::Allocate(size_t bytes) {
  bytes = (bytes + 63) / 64 * 64;
  if (chunks_.empty() || chunks_.back().size - chunks_.back().used < bytes) {
    constexpr size_t kHuge = size_t{2} << 20;
    Chunk c;
    c.size = std::max(kChunkBytes, (bytes + kHuge - 1) / kHuge * kHuge);
    c.map_bytes = c.size + kHuge;  // room to align the start to 2 MB
    c.map = mmap(nullptr, c.map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);
    if (c.map == MAP_FAILED) return nullptr;
    const uintptr_t start = reinterpret_cast<uintptr_t>(c.map);
    c.base = reinterpret_cast<uint8_t*>((start + kHuge - 1) / kHuge * kHuge);
    madvise(c.base, c.size, MADV_HUGEPAGE);  // a hint; failure is harmless
    chunks_.push_back(c);
  }
  Chunk& c = chunks_.back();
  uint8_t* p = c.base + c.used;
  c.used += bytes;
  used_total_ += bytes;
  return p;
}

namespace {

struct Choice {
  kernels::MatmulImpl impl = kernels::MatmulImpl::kReference;
  bool pack = false;                      // fp32 panels
  std::optional<kernels::Int8Isa> int8;   // int8 panels
  bool amx_bf16 = false;                  // int8 panels, bf16 AMX kernels
};

absl::StatusOr<Choice> Choose(KernelChoice choice, GgmlType type, int64_t k,
                              const std::string& name) {
  const std::string type_name = GgmlTypeName(static_cast<uint32_t>(type));
  if (!kernels::MatmulSupported(kernels::MatmulImpl::kReference, type, k)) {
    return absl::UnimplementedError(
        absl::StrCat("tensor ", name, ": no matmul for type ", type_name, " with rows of ", k));
  }
  const bool avx512 = kernels::MatmulSupported(kernels::MatmulImpl::kAvx512, type, k);
  const bool packed = kernels::PackedMatmulSupported(type, k);
  const bool int8 = kernels::Int8MatmulSupported(type, k);
  auto int8_path = [&](kernels::Int8Isa isa) -> absl::StatusOr<Choice> {
    if (!kernels::Int8IsaSupported(isa)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "kernels ", kernels::Int8IsaName(isa), " need CPU features this machine lacks (",
          kernels::CpuFeatures::Get().ToString(), ")"));
    }
    // The ISA that really runs this type (K formats: AVX2 where AVX-512 was asked for).
    if (int8) return Choice{kernels::MatmulImpl::kReference, false, kernels::Int8IsaFor(isa, type)};
    // Unquantized weights (F32/F16/BF16): fp32 kernels of the same ISA family.
    return Choice{isa != kernels::Int8Isa::kAvx2 ? kernels::BestMatmulImpl(type, k)
                                                        : kernels::MatmulImpl::kReference,
                  false, std::nullopt};
  };
  switch (ResolveKernelChoice(choice)) {
    case KernelChoice::kAuto:  // resolved above
    case KernelChoice::kReference:
      return Choice{};
    case KernelChoice::kAmx:
      if (!kernels::Bf16MatmulSupported()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "kernels amx need AMX bf16 tiles this machine lacks (",
            kernels::CpuFeatures::Get().ToString(), ")"));
      }
      if (kernels::Bf16PackSupported(type, k)) {
        return Choice{kernels::MatmulImpl::kReference, false, std::nullopt, true};
      }
      // Types without bf16 records (the K formats) take the int8 kernels: the model
      // makes each input in every form its Linears want (InputForms).
      if (int8) return int8_path(kernels::Int8Isa::kAmx);
      return Choice{kernels::BestMatmulImpl(type, k), false, std::nullopt, false};
    case KernelChoice::kAvx512Vnni:
      // Where AMX int8 tiles exist they take the whole 16-row tiles: the same bits.
      return int8_path(kernels::Int8IsaSupported(kernels::Int8Isa::kAmx)
                           ? kernels::Int8Isa::kAmx
                           : kernels::Int8Isa::kAvx512Vnni);
    case KernelChoice::kAvx2:
      return int8_path(kernels::Int8Isa::kAvx2);
    case KernelChoice::kAvx512:
    case KernelChoice::kPacked:
      if (!kernels::CpuFeatures::Get().HasAvx512()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "tensor ", name, ": AVX-512 matmul unavailable on this CPU (",
            kernels::CpuFeatures::Get().ToString(), ")"));
      }
      // These exact fp32 paths have AVX-512 code for F32/F16/BF16/Q4_0/Q4_1/Q8_0; other
      // types (the K formats) keep exact arithmetic on the reference kernel.
      if (!avx512) return Choice{};
      return Choice{kernels::MatmulImpl::kAvx512, choice == KernelChoice::kPacked && packed,
                    std::nullopt};
  }
  return absl::InternalError("bad kernel choice");
}

}  // namespace

KernelChoice ResolveKernelChoice(KernelChoice choice) {
  if (choice != KernelChoice::kAuto) return choice;
  // AMX only where its tests ran and passed: Sapphire-Rapids-class Xeons (bf16_matmul_test,
  // llama_accuracy_test, llama_batch_invariance_test).
  if (kernels::Bf16MatmulSupported()) return KernelChoice::kAmx;
  if (kernels::Int8IsaSupported(kernels::Int8Isa::kAvx512Vnni)) return KernelChoice::kAvx512Vnni;
  if (kernels::Int8IsaSupported(kernels::Int8Isa::kAvx2)) return KernelChoice::kAvx2;
  return KernelChoice::kReference;
}

KernelChoice LmHeadKernelChoice(KernelChoice choice) {
  return ResolveKernelChoice(choice) == KernelChoice::kAmx ? KernelChoice::kAvx512Vnni : choice;
}

std::vector<KernelChoice> SupportedKernelChoices() {
  const kernels::CpuFeatures& f = kernels::CpuFeatures::Get();
  std::vector<KernelChoice> v = {KernelChoice::kReference};
  if (kernels::Bf16MatmulSupported()) v.push_back(KernelChoice::kAmx);
  if (f.HasAvx512Vnni()) v.push_back(KernelChoice::kAvx512Vnni);
  if (f.HasAvx2()) v.push_back(KernelChoice::kAvx2);
  if (f.HasAvx512()) {
    v.push_back(KernelChoice::kAvx512);
    v.push_back(KernelChoice::kPacked);
  }
  return v;
}

bool IsInt8KernelChoice(KernelChoice choice) {
  choice = ResolveKernelChoice(choice);
  return choice == KernelChoice::kAvx512Vnni || choice == KernelChoice::kAvx2;
}

bool RoundsActivations(KernelChoice choice) {
  return IsInt8KernelChoice(choice) || ResolveKernelChoice(choice) == KernelChoice::kAmx;
}

void ActivationBuffer::Resize(InputForms forms, int64_t rows, int64_t k) {
  forms_ = forms;
  if (forms.q8) {
    const size_t n = static_cast<size_t>(rows * k), nb = static_cast<size_t>(rows * (k / 32));
    if (q_.size() < n) q_.resize(n);
    if (d_.size() < nb) {
      d_.resize(nb);
      ds_.resize(nb);
      qsum_.resize(nb);
    }
    q8_ = kernels::Q8Rows{k, q_.data(), d_.data(), ds_.data(), qsum_.data()};
  }
  if (forms.bf16) {
    const size_t n = static_cast<size_t>(kernels::Bf16RowsElements(rows, k));
    if (bf16_data_.size() < n) bf16_data_.resize(n);
    bf16_ = kernels::Bf16Rows{k, bf16_data_.data()};
  }
}

void ActivationBuffer::Convert(const float* x, int64_t ldx, int64_t row_begin, int64_t row_end) {
  if (forms_.q8) kernels::QuantizeRowsQ8(x, ldx, row_begin, row_end, &q8_);
  if (forms_.bf16) kernels::ConvertRowsBf16(x, ldx, row_begin, row_end, &bf16_);
}

LinearInput ActivationBuffer::Input(const float* x, int64_t ldx) const {
  return LinearInput{x, ldx, forms_.q8 ? &q8_ : nullptr, forms_.bf16 ? &bf16_ : nullptr};
}

absl::StatusOr<KernelChoice> ParseKernelChoice(absl::string_view name) {
  if (name == "auto") return KernelChoice::kAuto;
  if (name == "reference") return KernelChoice::kReference;
  if (name == "avx512vnni") return KernelChoice::kAvx512Vnni;
  if (name == "avx2") return KernelChoice::kAvx2;
  if (name == "avx512") return KernelChoice::kAvx512;
  if (name == "packed") return KernelChoice::kPacked;
  if (name == "amx") return KernelChoice::kAmx;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown kernels '", name, "' (auto, amx, avx512vnni, avx2, reference, avx512, packed)"));
}

const char* KernelChoiceName(KernelChoice choice) {
  switch (choice) {
    case KernelChoice::kAuto:
      return "auto";
    case KernelChoice::kReference:
      return "reference";
    case KernelChoice::kAvx512:
      return "avx512";
    case KernelChoice::kPacked:
      return "packed";
    case KernelChoice::kAvx512Vnni:
      return "avx512vnni";
    case KernelChoice::kAvx2:
      return "avx2";
    case KernelChoice::kAmx:
      return "amx";
  }
  return "?";
}

const char* Linear::kernel_name() const {
  if (amx_bf16_) return "amx_bf16";
  if (int8_isa_.has_value()) return kernels::Int8IsaName(*int8_isa_);
  return packed_ != nullptr ? "packed" : kernels::MatmulImplName(impl_);
}

absl::StatusOr<Linear> Linear::Prepare(const kernels::QuantMatrix& matrix,
                                       const std::string& name, KernelChoice choice,
                                       std::shared_ptr<PackedArena> arena) {
  auto c = Choose(choice, matrix.type, matrix.k, name);
  if (!c.ok()) return c.status();
  Linear l;
  l.matrix_ = matrix;
  l.impl_ = c->impl;
  l.choice_ = choice;
  l.name_ = name;
  l.arena_ = std::move(arena);
  if (c->pack || c->int8.has_value() || c->amx_bf16) {
    // Without a shared arena, the matrix gets one of its own.
    std::shared_ptr<PackedArena> owner =
        l.arena_ != nullptr ? l.arena_ : std::make_shared<PackedArena>();
    const int64_t bytes = c->amx_bf16 ? kernels::Bf16PackedBytes(matrix.type, matrix.n, matrix.k)
                          : c->int8.has_value()
                              ? kernels::Int8PackedBytes(matrix.type, matrix.n, matrix.k)
                              : kernels::PackedBytes(matrix.type, matrix.n, matrix.k);
    uint8_t* dst = owner->Allocate(static_cast<size_t>(bytes));
    if (dst == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(name, ": cannot map ", bytes, " bytes"));
    }
    if (c->amx_bf16) {
      kernels::PackBf16Weights(matrix, dst);
      l.amx_bf16_ = true;
      l.bf16_view_ = kernels::Bf16PackedMatrix{matrix.type, dst, matrix.n, matrix.k};
    } else if (c->int8.has_value()) {
      kernels::PackInt8Weights(matrix, dst);
      l.int8_isa_ = c->int8;
      l.int8_view_ = kernels::Int8PackedMatrix{matrix.type, dst, matrix.n, matrix.k};
    } else {
      kernels::PackWeights(matrix, dst);
      l.packed_view_ = kernels::PackedMatrix{matrix.type, dst, matrix.n, matrix.k};
    }
    l.packed_ = std::move(owner);
  }
  return l;
}

absl::StatusOr<Linear> Linear::FromTensor(const GgufTensor& t, int64_t in_features,
                                          int64_t out_features, KernelChoice choice,
                                          std::shared_ptr<PackedArena> arena) {
  if (t.ne.size() != 2 || t.ne[0] != in_features || t.ne[1] != out_features) {
    std::string shape;
    for (int64_t d : t.ne) absl::StrAppend(&shape, shape.empty() ? "" : ", ", d);
    return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, " has shape [", shape,
                                                   "], want [", in_features, ", ",
                                                   out_features, "]"));
  }
  const int64_t row_bytes = RowBytes(t.type, in_features);
  if (row_bytes <= 0 || static_cast<uint64_t>(row_bytes * out_features) > t.nbytes) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, " is truncated"));
  }
  return Prepare(kernels::QuantMatrix{t.type, t.data, out_features, in_features, row_bytes},
                 t.name, choice, std::move(arena));
}

absl::StatusOr<Linear> Linear::WithKernels(KernelChoice choice) const {
  return Prepare(matrix_, name_, choice, arena_);
}

absl::StatusOr<Linear> Linear::RowSlice(int64_t begin, int64_t end) const {
  if (begin < 0 || begin > end || end > matrix_.n) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": bad row slice [", begin, ", ",
                                                   end, ") of ", matrix_.n));
  }
  kernels::QuantMatrix m = matrix_;
  m.data += begin * matrix_.row_stride;
  m.n = end - begin;
  return Prepare(m, name_, choice_, arena_);
}

absl::StatusOr<Linear> Linear::ColSlice(int64_t begin, int64_t end) const {
  const GgmlTypeTraits* traits = GetGgmlTypeTraits(static_cast<uint32_t>(matrix_.type));
  if (begin < 0 || begin >= end || end > matrix_.k || traits == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": bad column slice [", begin, ", ",
                                                   end, ") of ", matrix_.k));
  }
  if (begin % traits->block_size != 0 || (end - begin) % traits->block_size != 0) {
    // A quantization block cannot be split: K-quants (256-weight super-blocks) need
    // tensor-parallel shards of input features on multiples of 256.
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": column slice [", begin, ", ", end, ") of ", matrix_.k, " cuts ",
        traits->name, " blocks of ", traits->block_size,
        " weights (a tensor-parallel split of this matrix's input features must fall on "
        "multiples of ", traits->block_size, ")"));
  }
  kernels::QuantMatrix m = matrix_;
  m.data += RowBytes(matrix_.type, begin);
  m.k = end - begin;
  return Prepare(m, name_, choice_, arena_);
}

}  // namespace weft

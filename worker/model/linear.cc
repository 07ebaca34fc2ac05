#include "worker/model/linear.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

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
  bool pack = false;
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
  switch (choice) {
    case KernelChoice::kReference:
      return Choice{};
    case KernelChoice::kAuto:
      if (packed) return Choice{kernels::MatmulImpl::kAvx512, true};
      return Choice{kernels::BestMatmulImpl(type, k), false};
    case KernelChoice::kAvx512:
    case KernelChoice::kPacked:
      if (!avx512) {
        return absl::FailedPreconditionError(absl::StrCat(
            "tensor ", name, ": AVX-512 matmul unavailable (CPU or ", type_name, ")"));
      }
      return Choice{kernels::MatmulImpl::kAvx512, choice == KernelChoice::kPacked && packed};
  }
  return absl::InternalError("bad kernel choice");
}

}  // namespace

absl::StatusOr<KernelChoice> ParseKernelChoice(absl::string_view name) {
  if (name == "auto") return KernelChoice::kAuto;
  if (name == "reference") return KernelChoice::kReference;
  if (name == "avx512") return KernelChoice::kAvx512;
  if (name == "packed") return KernelChoice::kPacked;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown kernels '", name, "' (auto, reference, avx512, packed)"));
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
  }
  return "?";
}

const char* Linear::kernel_name() const {
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
  if (c->pack) {
    // Without a shared arena, the matrix gets one of its own.
    std::shared_ptr<PackedArena> owner =
        l.arena_ != nullptr ? l.arena_ : std::make_shared<PackedArena>();
    const int64_t bytes = kernels::PackedBytes(matrix.type, matrix.n, matrix.k);
    uint8_t* dst = owner->Allocate(static_cast<size_t>(bytes));
    if (dst == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(name, ": cannot map ", bytes, " bytes"));
    }
    kernels::PackWeights(matrix, dst);
    l.packed_ = std::move(owner);
    l.packed_view_ = kernels::PackedMatrix{matrix.type, dst, matrix.n, matrix.k};
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
  if (begin < 0 || begin >= end || end > matrix_.k || traits == nullptr ||
      begin % traits->block_size != 0 || (end - begin) % traits->block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": bad column slice [", begin, ", ",
                                                   end, ") of ", matrix_.k));
  }
  kernels::QuantMatrix m = matrix_;
  m.data += RowBytes(matrix_.type, begin);
  m.k = end - begin;
  return Prepare(m, name_, choice_, arena_);
}

}  // namespace weft

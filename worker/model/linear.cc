#include "worker/model/linear.h"

#include "absl/strings/str_cat.h"

namespace weft {
namespace {

absl::StatusOr<kernels::MatmulImpl> ChooseImpl(KernelChoice choice, GgmlType type, int64_t k,
                                               const std::string& name) {
  const std::string type_name = GgmlTypeName(static_cast<uint32_t>(type));
  if (!kernels::MatmulSupported(kernels::MatmulImpl::kReference, type, k)) {
    return absl::UnimplementedError(
        absl::StrCat("tensor ", name, ": no matmul for type ", type_name, " with rows of ", k));
  }
  switch (choice) {
    case KernelChoice::kAuto:
      return kernels::BestMatmulImpl(type, k);
    case KernelChoice::kReference:
      return kernels::MatmulImpl::kReference;
    case KernelChoice::kAvx512:
      if (!kernels::MatmulSupported(kernels::MatmulImpl::kAvx512, type, k)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "tensor ", name, ": AVX-512 matmul unavailable (CPU or ", type_name, ")"));
      }
      return kernels::MatmulImpl::kAvx512;
  }
  return absl::InternalError("bad kernel choice");
}

}  // namespace

absl::StatusOr<KernelChoice> ParseKernelChoice(absl::string_view name) {
  if (name == "auto") return KernelChoice::kAuto;
  if (name == "reference") return KernelChoice::kReference;
  if (name == "avx512") return KernelChoice::kAvx512;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown kernels '", name, "' (auto, reference, avx512)"));
}

const char* KernelChoiceName(KernelChoice choice) {
  switch (choice) {
    case KernelChoice::kAuto:
      return "auto";
    case KernelChoice::kReference:
      return "reference";
    case KernelChoice::kAvx512:
      return "avx512";
  }
  return "?";
}

absl::StatusOr<Linear> Linear::FromTensor(const GgufTensor& t, int64_t in_features,
                                          int64_t out_features, KernelChoice choice) {
  if (t.ne.size() != 2 || t.ne[0] != in_features || t.ne[1] != out_features) {
    std::string shape;
    for (int64_t d : t.ne) absl::StrAppend(&shape, shape.empty() ? "" : ", ", d);
    return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, " has shape [", shape,
                                                   "], want [", in_features, ", ",
                                                   out_features, "]"));
  }
  Linear l;
  l.name_ = t.name;
  l.choice_ = choice;
  const int64_t row_bytes = RowBytes(t.type, in_features);
  if (row_bytes <= 0 || static_cast<uint64_t>(row_bytes * out_features) > t.nbytes) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, " is truncated"));
  }
  auto impl = ChooseImpl(choice, t.type, in_features, t.name);
  if (!impl.ok()) return impl.status();
  l.impl_ = *impl;
  l.matrix_ = kernels::QuantMatrix{t.type, t.data, out_features, in_features, row_bytes};
  return l;
}

absl::StatusOr<Linear> Linear::RowSlice(int64_t begin, int64_t end) const {
  if (begin < 0 || begin > end || end > matrix_.n) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": bad row slice [", begin, ", ",
                                                   end, ") of ", matrix_.n));
  }
  Linear l = *this;
  l.matrix_.data += begin * matrix_.row_stride;
  l.matrix_.n = end - begin;
  return l;
}

absl::StatusOr<Linear> Linear::ColSlice(int64_t begin, int64_t end) const {
  const GgmlTypeTraits* traits = GetGgmlTypeTraits(static_cast<uint32_t>(matrix_.type));
  if (begin < 0 || begin >= end || end > matrix_.k || traits == nullptr ||
      begin % traits->block_size != 0 || (end - begin) % traits->block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": bad column slice [", begin, ", ",
                                                   end, ") of ", matrix_.k));
  }
  Linear l = *this;
  l.matrix_.data += RowBytes(matrix_.type, begin);
  l.matrix_.k = end - begin;
  auto impl = ChooseImpl(choice_, matrix_.type, l.matrix_.k, name_);
  if (!impl.ok()) return impl.status();
  l.impl_ = *impl;
  return l;
}

}  // namespace weft

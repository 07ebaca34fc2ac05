#include "common/kv_dtype.h"

#include "absl/strings/str_cat.h"

namespace weft {

const char* KvDtypeName(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32:
      return "f32";
    case KvDtype::kF16:
      return "f16";
    case KvDtype::kBf16:
      return "bf16";
    case KvDtype::kInt8:
      return "int8";
  }
  return "?";
}

absl::StatusOr<KvDtype> ParseKvDtype(absl::string_view name) {
  for (KvDtype d : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBf16, KvDtype::kInt8}) {
    if (name == KvDtypeName(d)) return d;
  }
  if (name == "fp16") return KvDtype::kF16;  // as the CUDA backend always took it
  return absl::InvalidArgumentError(
      absl::StrCat("unknown KV cache type '", name, "' (f32, f16, bf16, int8)"));
}

}  // namespace weft

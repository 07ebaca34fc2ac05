#include "common/field_error.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace weft {
namespace {

// The payload's type URL for `schema`.
std::string TypeUrl(absl::string_view schema) { return absl::StrCat("weft/field-error/", schema); }

}  // namespace

absl::Status FieldErrorStatus(absl::string_view schema, const FieldError& error) {
  absl::Status s =
      absl::InvalidArgumentError(absl::StrCat(error.field, ": ", error.reason));
  // The field, a NUL, the reason (a field path never holds a NUL).
  s.SetPayload(TypeUrl(schema), absl::Cord(absl::StrCat(error.field, std::string(1, '\0'),
                                                        error.reason)));
  return s;
}

std::optional<FieldError> GetFieldError(const absl::Status& status, absl::string_view schema) {
  const auto payload = status.GetPayload(TypeUrl(schema));  // an absl::optional
  if (!payload) return std::nullopt;
  const std::string flat(*payload);
  const size_t nul = flat.find('\0');
  if (nul == std::string::npos) return std::nullopt;
  return FieldError{flat.substr(0, nul), flat.substr(nul + 1)};
}

}  // namespace weft

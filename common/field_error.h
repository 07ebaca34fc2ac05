// Field errors as data. A validator that refuses a request says which field failed and
// why as a FieldError; as an absl::Status (FieldErrorStatus) it is INVALID_ARGUMENT with
// the message "<field>: <reason>" (what people, logs and gRPC clients read) and carries
// the FieldError as a payload under `schema` — a name for whose field paths these are
// (the request contract's generate.proto paths, the OpenAI body's JSON names) — so that
// an edge maps the field to its own terms (an OpenAI "param") without reading text.
// Thread-safety: value types and pure functions.
#ifndef WEFT_COMMON_FIELD_ERROR_H_
#define WEFT_COMMON_FIELD_ERROR_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace weft {

struct FieldError {
  std::string field;   // a path in `schema`'s terms: "sampling.top_p", "messages[2].role"
  std::string reason;  // "must be in (0, 1]"
};

absl::Status FieldErrorStatus(absl::string_view schema, const FieldError& error);
// The FieldError a status carries under `schema`, if any.
std::optional<FieldError> GetFieldError(const absl::Status& status, absl::string_view schema);

}  // namespace weft

#endif  // WEFT_COMMON_FIELD_ERROR_H_

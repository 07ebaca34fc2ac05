// Status helpers shared by every component.
//
// WEFT_RETURN_IF_ERROR(expr): evaluates an absl::Status expression and returns it from
// the enclosing function when it is not OK.
// WEFT_ASSIGN_OR_RETURN(lhs, expr): evaluates an absl::StatusOr<T>; on error returns the
// status, otherwise moves the value into `lhs` (which may be a declaration).
// Thread-safety: macros only; no state.
#ifndef WEFT_COMMON_STATUS_MACROS_H_
#define WEFT_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define WEFT_STATUS_CONCAT_INNER_(a, b) a##b
#define WEFT_STATUS_CONCAT_(a, b) WEFT_STATUS_CONCAT_INNER_(a, b)

#define WEFT_RETURN_IF_ERROR(expr)                 \
  do {                                             \
    const ::absl::Status weft_status_ = (expr);    \
    if (!weft_status_.ok()) return weft_status_;   \
  } while (0)

#define WEFT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

#define WEFT_ASSIGN_OR_RETURN(lhs, expr) \
  WEFT_ASSIGN_OR_RETURN_IMPL_(WEFT_STATUS_CONCAT_(weft_statusor_, __LINE__), lhs, expr)

#endif  // WEFT_COMMON_STATUS_MACROS_H_

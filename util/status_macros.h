// Status plumbing used across Cascade.
//
// Contract: every fallible function inside Cascade returns absl::Status or
// absl::StatusOr<T>; exceptions never cross a module boundary. These macros keep the
// early-return pattern short. They evaluate their argument exactly once.
#ifndef CASCADE_UTIL_STATUS_MACROS_H_
#define CASCADE_UTIL_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define CASCADE_CONCAT_INNER_(a, b) a##b
#define CASCADE_CONCAT_(a, b) CASCADE_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function when `expr` is not OK.
#define CASCADE_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::absl::Status cascade_status_ = (expr);           \
    if (!cascade_status_.ok()) return cascade_status_; \
  } while (0)

// `lhs` = value of the StatusOr `rexpr`, or return its status from the enclosing function.
#define CASCADE_ASSIGN_OR_RETURN(lhs, rexpr) \
  CASCADE_ASSIGN_OR_RETURN_IMPL_(CASCADE_CONCAT_(cascade_statusor_, __LINE__), lhs, rexpr)

#define CASCADE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                   \
  if (!statusor.ok()) return std::move(statusor).status();   \
  lhs = std::move(statusor).value()

#endif  // CASCADE_UTIL_STATUS_MACROS_H_

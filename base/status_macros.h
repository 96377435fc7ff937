// Early-return helpers for absl::Status and absl::StatusOr.
//
// Abseil 20220623 (Debian 12) ships neither RETURN_IF_ERROR nor
// ASSIGN_OR_RETURN, so they live here, once.
//
// Example:
//   RETURN_IF_ERROR(file.Open());
//   ASSIGN_OR_RETURN(Trace trace, ReadTrace(path));
#ifndef BUBBLEWATCH_BASE_STATUS_MACROS_H_
#define BUBBLEWATCH_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Evaluates `expr` (an absl::Status) and returns it from the enclosing
// function if it is not OK.
#define RETURN_IF_ERROR(expr)                                  \
  do {                                                         \
    ::absl::Status bubblewatch_status_ = (expr);               \
    if (!bubblewatch_status_.ok()) return bubblewatch_status_; \
  } while (0)

#define BUBBLEWATCH_CONCAT_INNER_(a, b) a##b
#define BUBBLEWATCH_CONCAT_(a, b) BUBBLEWATCH_CONCAT_INNER_(a, b)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status from
// the enclosing function, otherwise move-assigns the value to `lhs`, which may
// be a declaration (`ASSIGN_OR_RETURN(auto x, F())`).
#define ASSIGN_OR_RETURN(lhs, rexpr)                                           \
  ASSIGN_OR_RETURN_IMPL_(BUBBLEWATCH_CONCAT_(bubblewatch_statusor_, __LINE__), \
                         lhs, rexpr)

#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                           \
  if (!statusor.ok()) return statusor.status();      \
  lhs = std::move(statusor).value()

#endif  // BUBBLEWATCH_BASE_STATUS_MACROS_H_

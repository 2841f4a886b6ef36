// Error propagation for absl::Status / absl::StatusOr<T>, as the project
// writes it everywhere:
//
//   RETURN_IF_ERROR(store->Put(key, value));
//   ASSIGN_OR_RETURN(ShardMap map, ShardMap::Load(path));
//   ASSIGN_OR_RETURN(std::unique_ptr<Reader> reader, Reader::Open(dir));
//
// RETURN_IF_ERROR(expr): evaluates `expr` (an absl::Status) once and returns
// it from the enclosing function when it is not OK.
// ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (an absl::StatusOr<T>) once;
// returns its status when not OK, else moves the value into `lhs` (a
// declaration or an existing variable). The enclosing function returns
// absl::Status or any absl::StatusOr<U>. Errors pass through unchanged; add
// context by hand where a caller needs it.
#ifndef ENGRAM_COMMON_UTIL_STATUS_MACROS_H_
#define ENGRAM_COMMON_UTIL_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define RETURN_IF_ERROR(expr)                                           \
  do {                                                                  \
    if (::absl::Status engram_status_ = (expr); !engram_status_.ok()) { \
      return engram_status_;                                            \
    }                                                                   \
  } while (0)

#define ENGRAM_STATUS_CONCAT_INNER_(a, b) a##b
#define ENGRAM_STATUS_CONCAT_(a, b) ENGRAM_STATUS_CONCAT_INNER_(a, b)

#define ASSIGN_OR_RETURN(lhs, expr) \
  ENGRAM_ASSIGN_OR_RETURN_IMPL_(ENGRAM_STATUS_CONCAT_(engram_statusor_, __LINE__), lhs, expr)

#define ENGRAM_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)

#endif  // ENGRAM_COMMON_UTIL_STATUS_MACROS_H_

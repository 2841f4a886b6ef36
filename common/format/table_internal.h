// Helpers shared by the table's manifest (table_manifest.cc) and its row
// files (table.cc). Internal to common/.
#ifndef ENGRAM_COMMON_FORMAT_TABLE_INTERNAL_H_
#define ENGRAM_COMMON_FORMAT_TABLE_INTERNAL_H_

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace engram::table_internal {

inline absl::Status ErrnoStatus(absl::string_view what, int err) {
  const std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  return err == ENOENT ? absl::NotFoundError(msg) : absl::InternalError(msg);
}

inline std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

// The first error of a list of statuses, or OK.
inline absl::Status FirstError(std::initializer_list<absl::Status> all) {
  for (const absl::Status& s : all) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace engram::table_internal

#endif  // ENGRAM_COMMON_FORMAT_TABLE_INTERNAL_H_

// Small file-system helpers for the shard directory code: whole-file reads,
// atomic replacement, recursive removal. Errors name the path.
#ifndef ENGRAM_COMMON_UTIL_FILE_UTIL_H_
#define ENGRAM_COMMON_UTIL_FILE_UTIL_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace engram {

// NotFound if `path` does not exist; Internal on other I/O errors.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Calls fn with the file's bytes in order, in chunks of at most 1 MiB (a
// fixed buffer: memory does not grow with the file), and stops at the first
// error fn returns. Errors as ReadFileToString's.
absl::Status ReadFileInChunks(const std::string& path,
                              absl::FunctionRef<absl::Status(std::string_view)> fn);

// Writes `contents` to a temporary file next to `path`, fsyncs it and renames
// it over `path`, so readers see either the old or the new file.
absl::Status WriteFileAtomically(const std::string& path, std::string_view contents);

// fsyncs a directory, making renames and creations inside it durable.
absl::Status SyncDir(const std::string& dir);

// Removes `path` and everything below it; OK if it does not exist.
absl::Status RemoveTree(const std::string& path);

// XXH3-64 of a whole file, streamed; NotFound if absent.
absl::StatusOr<uint64_t> HashFile(const std::string& path);

}  // namespace engram

#endif  // ENGRAM_COMMON_UTIL_FILE_UTIL_H_

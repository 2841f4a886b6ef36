// Token traces: the files `tools/make-trace` writes, one sequence per line,
// its token ids separated by blanks. Read by `engramctl import
// --profile-trace` (the hot-row profile) and the capacity planner
// (`engramctl plan`), line by line with the same rules. Header-only; pure
// functions, thread-safe.
#ifndef ENGRAM_COMMON_FORMAT_TOKEN_TRACE_H_
#define ENGRAM_COMMON_FORMAT_TOKEN_TRACE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace engram {

// The token ids of line `line_no` of trace `path`, into *ids (cleared
// first): tokens split on spaces, tabs and CRs, each an integer in [0,
// vocab_size). A blank line gives no ids. InvalidArgument naming the file,
// line and token otherwise.
inline absl::Status ParseTraceLine(absl::string_view line, int64_t vocab_size,
                                   absl::string_view path, int64_t line_no,
                                   std::vector<int64_t>* ids) {
  ids->clear();
  for (absl::string_view tok : absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty())) {
    int64_t id = 0;
    if (!absl::SimpleAtoi(tok, &id) || id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", line_no, ": token '", tok, "' is not a token id in [0, ", vocab_size, ")"));
    }
    ids->push_back(id);
  }
  return absl::OkStatus();
}

}  // namespace engram

#endif  // ENGRAM_COMMON_FORMAT_TOKEN_TRACE_H_

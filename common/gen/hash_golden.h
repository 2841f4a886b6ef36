// Runs a hash golden file (layout + calls with expected row ids, the format
// of tests/golden/README.md) through NgramHasher. Used by
// `engramctl hash-check` and by the tests.
#ifndef ENGRAM_COMMON_GEN_HASH_GOLDEN_H_
#define ENGRAM_COMMON_GEN_HASH_GOLDEN_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace engram {

struct HashGoldenResult {
  int64_t calls_passed = 0;
  int64_t calls_failed = 0;
  int64_t ids_checked = 0;
  std::string first_mismatch;  // empty when every call matched
  // True when the file is valid JSON but no hash golden (no "layout" and
  // "calls" members, e.g. the fp8 codec goldens): nothing was checked.
  bool not_hash_golden = false;
};

// Reads `path` and replays its calls in order, batch row b being one
// sequence each. A malformed file is an error status; mismatching ids are
// counted in the result, not an error. A JSON object without "layout"
// and "calls" is reported as not_hash_golden.
absl::StatusOr<HashGoldenResult> CheckHashGoldenFile(const std::string& path);

}  // namespace engram

#endif  // ENGRAM_COMMON_GEN_HASH_GOLDEN_H_

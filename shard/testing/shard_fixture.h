// Test helpers shared by the shard tests: scratch directories and a small
// generated table.
#ifndef ENGRAM_SHARD_TESTING_SHARD_FIXTURE_H_
#define ENGRAM_SHARD_TESTING_SHARD_FIXTURE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace engram::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on
// destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Writes a "small"-preset table (66-byte rows) with the given
// engram_vocab_size and seed to `dir`.
absl::Status MakeSmallTable(const std::string& dir, int64_t engram_vocab_size = 300,
                            uint64_t seed = 7);

// Flips one byte of a file at `offset`.
absl::Status FlipByte(const std::string& path, uint64_t offset);

}  // namespace engram::testing

#endif  // ENGRAM_SHARD_TESTING_SHARD_FIXTURE_H_

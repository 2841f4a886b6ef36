// Test helpers for files: scratch directories, a small generated table, a
// damaged byte. Test-only (library engram_common_testing).
#ifndef ENGRAM_COMMON_TESTING_TEST_FILES_H_
#define ENGRAM_COMMON_TESTING_TEST_FILES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/hash/layout.h"

namespace engram::testing {

// A fresh directory $TEST_TMPDIR/PREFIX.XXXXXX (else under $TMPDIR, else
// /tmp), removed with everything in it on destruction. Aborts when it
// cannot be made.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "engram-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A valid hash layout small enough to reason about by hand: 4 tokens, one
// Engram layer of 17 rows, orders 2..3, 2 heads, primes 2, 3, 5, 7.
HashLayout TinyHashLayout();

// Writes a "small"-preset table (66-byte rows) with the given
// engram_vocab_size and seed to `dir`.
absl::Status MakeSmallTable(const std::string& dir, int64_t engram_vocab_size = 300,
                            uint64_t seed = 7);

// Writes a token trace to `path`: `lines` sequences of Zipf(1.1) tokens over
// `ids` distinct token ids (k * 37 + 5 for rank k), min_len..max_len tokens
// each, the same for the same seed.
void WriteZipfTrace(const std::string& path, uint64_t seed, int lines, int min_len, int max_len,
                    int ids);

// Flips one byte of a file at `offset`.
absl::Status FlipByte(const std::string& path, uint64_t offset);

}  // namespace engram::testing

#endif  // ENGRAM_COMMON_TESTING_TEST_FILES_H_

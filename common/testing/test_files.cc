#include "common/testing/test_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/gen/table_gen.h"
#include "common/util/file_util.h"

namespace engram::testing {

TempDir::TempDir(const std::string& prefix) {
  const char* base = std::getenv("TEST_TMPDIR");
  if (base == nullptr || *base == '\0') base = std::getenv("TMPDIR");
  if (base == nullptr || *base == '\0') base = "/tmp";
  std::string pattern = absl::StrCat(base, "/", prefix, ".XXXXXX");
  if (::mkdtemp(pattern.data()) == nullptr) std::abort();
  path_ = pattern;
}

TempDir::~TempDir() {
  if (!path_.empty()) (void)RemoveTree(path_);
}

HashLayout TinyHashLayout() {
  HashLayout l;
  l.vocab_size = 4;
  l.engram_layer_ids = {1};
  l.max_ngram_size = 3;
  l.n_heads = 2;
  l.pad_id = 2;
  l.token_map = {0, 1, 2, 3};
  l.multipliers = {{3, 5, 7}};
  l.primes = {{{2, 3}, {5, 7}}};
  l.offsets = {{0, 2, 5, 10}};
  l.table_rows = {17};
  return l;
}

absl::Status MakeSmallTable(const std::string& dir, int64_t engram_vocab_size, uint64_t seed) {
  GenTableOptions o;
  o.out_dir = dir;
  o.preset = "small";
  o.engram_vocab_size = engram_vocab_size;
  o.seed = seed;
  o.table_name = "shard-test";
  return GenerateTable(o, nullptr);
}

void WriteZipfTrace(const std::string& path, uint64_t seed, int lines, int min_len, int max_len,
                    int ids) {
  std::mt19937_64 rng(seed);
  std::vector<double> cdf(static_cast<size_t>(ids));
  double sum = 0;
  for (int k = 0; k < ids; ++k) cdf[k] = sum += 1.0 / std::pow(k + 1.0, 1.1);
  std::ofstream out(path);
  for (int line = 0; line < lines; ++line) {
    const int len =
        min_len + static_cast<int>(rng() % static_cast<uint64_t>(max_len - min_len + 1));
    for (int t = 0; t < len; ++t) {
      const double u = static_cast<double>(rng() >> 11) / 9007199254740992.0 * sum;
      const int k = static_cast<int>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
      out << (t ? " " : "") << (std::min(k, ids - 1) * 37 + 5);
    }
    out << "\n";
  }
}

absl::Status FlipByte(const std::string& path, uint64_t offset) {
  const int fd = ::open(path.c_str(), O_RDWR);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  uint8_t b = 0;
  bool ok = ::pread(fd, &b, 1, static_cast<off_t>(offset)) == 1;
  b ^= 0x5a;
  ok = ok && ::pwrite(fd, &b, 1, static_cast<off_t>(offset)) == 1;
  ::close(fd);
  return ok ? absl::OkStatus()
            : absl::InternalError(absl::StrCat("cannot flip byte ", offset, " of ", path));
}

}  // namespace engram::testing

#include "bench/common/raw_disk.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace engram::bench {
namespace {

struct OpenFile {
  int fd = -1;
  uint64_t blocks = 0;
};

}  // namespace

absl::StatusOr<RawDiskResult> MeasureRandomReads(const RawDiskOptions& o) {
  if (o.files.empty() || o.threads < 1 || o.block_bytes == 0) {
    return absl::InvalidArgumentError("raw disk reads: no files or threads");
  }
  std::vector<OpenFile> files;
  std::vector<uint64_t> first_block;  // cumulative, for picking by size
  uint64_t total_blocks = 0;
  auto close_all = [&files] {
    for (const OpenFile& f : files) ::close(f.fd);
  };
  for (const std::string& path : o.files) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0) {
      absl::Status s = absl::InternalError(
          absl::StrCat("open ", path, " with O_DIRECT: ", std::strerror(errno)));
      if (fd >= 0) ::close(fd);
      close_all();
      return s;
    }
    const uint64_t blocks = static_cast<uint64_t>(st.st_size) / o.block_bytes;
    files.push_back({fd, blocks});
    first_block.push_back(total_blocks);
    total_blocks += blocks;
  }
  if (total_blocks == 0) {
    close_all();
    return absl::InvalidArgumentError("raw disk reads: files hold no block");
  }

  std::atomic<uint64_t> issued{0};
  std::atomic<bool> failed{false};
  absl::Mutex mu;
  std::string error;
  RawDiskResult result;
  const absl::Time deadline = absl::Now() + o.duration;
  auto worker = [&](int t) {
    void* buf = nullptr;
    if (posix_memalign(&buf, o.block_bytes, o.block_bytes) != 0) {
      failed.store(true);
      return;
    }
    std::mt19937_64 rng(o.seed * 1000003 + static_cast<uint64_t>(t));
    Latencies mine;
    while (!failed.load(std::memory_order_relaxed) &&
           issued.fetch_add(1, std::memory_order_relaxed) < o.max_reads && absl::Now() < deadline) {
      const uint64_t block = rng() % total_blocks;
      const size_t f =
          static_cast<size_t>(std::upper_bound(first_block.begin(), first_block.end(), block) -
                              first_block.begin() - 1);
      const off_t offset = static_cast<off_t>((block - first_block[f]) * o.block_bytes);
      const absl::Time begin = absl::Now();
      const ssize_t n = ::pread(files[f].fd, buf, o.block_bytes, offset);
      if (n != static_cast<ssize_t>(o.block_bytes)) {
        absl::MutexLock lock(&mu);
        if (error.empty()) {
          error = absl::StrCat("pread of ", o.files[f], " at ", offset, ": ",
                               n < 0 ? std::strerror(errno) : "short read");
        }
        failed.store(true);
        break;
      }
      mine.Add(absl::ToDoubleMicroseconds(absl::Now() - begin));
    }
    std::free(buf);
    absl::MutexLock lock(&mu);
    result.latency_us.Merge(mine);
  };

  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) threads.emplace_back(worker, t);
  for (std::thread& t : threads) t.join();
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  close_all();
  if (failed.load()) {
    return absl::InternalError(error.empty() ? "raw disk reads failed" : error);
  }
  result.reads = result.latency_us.count();
  return result;
}

}  // namespace engram::bench

// The ceiling for reads that miss RAM: many threads doing random,
// block-aligned O_DIRECT pread()s of one block each over a set of files (in
// engram-bench-shard, the shard's own SST files), so neither the page cache
// nor any read-ahead serves them.
#ifndef ENGRAM_BENCH_COMMON_RAW_DISK_H_
#define ENGRAM_BENCH_COMMON_RAW_DISK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/shard/bench_shard_measure.h"

namespace engram::bench {

struct RawDiskOptions {
  std::vector<std::string> files;  // read in proportion to their sizes
  int threads = 32;
  uint32_t block_bytes = 4096;  // read size and alignment
  absl::Duration duration = absl::Seconds(5);
  uint64_t max_reads = uint64_t{1} << 40;  // all threads together
  uint64_t seed = 1;
};

struct RawDiskResult {
  uint64_t reads = 0;
  double seconds = 0;
  Latencies latency_us;  // per read
  double reads_per_second() const { return seconds > 0 ? static_cast<double>(reads) / seconds : 0; }
};

// Runs the reads until the duration or the read count is used up. Errors:
// InvalidArgument for no files / threads, the errno of a failed open or
// pread (e.g. a file system without O_DIRECT) naming the file.
absl::StatusOr<RawDiskResult> MeasureRandomReads(const RawDiskOptions& options);

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_COMMON_RAW_DISK_H_

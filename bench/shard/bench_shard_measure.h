// Timed request loops for engram-bench-shard: client threads fetching
// decode steps back to back, bounded by a duration and a request count,
// with per-request latencies.
#ifndef ENGRAM_BENCH_SHARD_BENCH_SHARD_MEASURE_H_
#define ENGRAM_BENCH_SHARD_BENCH_SHARD_MEASURE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace engram::bench {

// Durations of timed operations, in microseconds. A plain value type.
class Latencies {
 public:
  void Add(double us) { us_.push_back(us); }
  void Merge(const Latencies& other) { us_.insert(us_.end(), other.us_.begin(), other.us_.end()); }
  size_t count() const { return us_.size(); }
  // The q-quantile (nearest rank), 0 when empty. REQUIRES: 0 <= q <= 1.
  double Percentile(double q) const;

 private:
  std::vector<double> us_;
};

// A server's cumulative counters; a phase records the difference over its
// loops. Rows by the tier that served them (summed over layers; all zero
// for a server without tiers), RocksDB's SST block reads, requests handled
// and the time spent handling them (parse, gather and disk reads; not the
// send), and the server's CPU time.
struct ServerCounters {
  double pinned = 0;
  double cached = 0;
  double disk = 0;
  double file_reads = 0;
  double requests = 0;
  double handler_seconds = 0;
  double cpu_seconds = 0;

  double rows() const { return pinned + cached + disk; }
  // Share served from RAM (pinned + cached); 0 when nothing was served.
  double hot_share() const { return rows() > 0 ? (pinned + cached) / rows() : 0; }
  ServerCounters operator-(const ServerCounters& o) const;
  ServerCounters& operator+=(const ServerCounters& o);
};

// Rows as pieces of contiguous bytes which, concatenated, are the rows in
// request order: one piece for a fetcher that receives into one buffer,
// several for one that reads a gRPC reply in place, slice by slice.
using RowPieces = std::span<const std::span<const uint8_t>>;
// The pieces concatenated (for checks, outside the timed loops).
std::vector<uint8_t> JoinPieces(RowPieces pieces);

// One client thread's way of fetching decode step `step`: the rows it
// received, in storage the fetcher owns (valid until its next call).
using FetchStep = std::function<absl::StatusOr<RowPieces>(size_t step)>;
// Checks the rows a fetcher returned for `step`.
using CheckStep = std::function<absl::Status(size_t step, RowPieces rows)>;

struct LoopLimits {
  absl::Duration duration = absl::Seconds(5);
  uint64_t max_requests = 100000;  // all threads together
};

// What one or more loops of one configuration measured.
struct LoopResult {
  uint64_t requests = 0;
  double seconds = 0;              // wall time, summed over merged loops
  double process_cpu_seconds = 0;  // of this whole process, user + system
  Latencies latency_us;

  void Merge(const LoopResult& other);
  double requests_per_second() const {
    return seconds > 0 ? static_cast<double>(requests) / seconds : 0;
  }
};

// Runs one thread per fetcher, each fetching steps back to back; the steps
// are taken in order from a counter shared by the threads, starting at
// *next_step (mod n_steps), which is advanced past the steps used. Stops at
// the first error, or when the duration or the request count runs out.
// Each thread's last rows are checked with `check` (when set) after the
// clock stops.
absl::StatusOr<LoopResult> RunLoop(const LoopLimits& limits, std::span<const FetchStep> fetchers,
                                   size_t n_steps, uint64_t* next_step, const CheckStep& check);

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_SHARD_BENCH_SHARD_MEASURE_H_

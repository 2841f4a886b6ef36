// The measurements of engram-bench: systems fetching one stream in
// alternating rounds (so a drift of the machine hits them alike), and the
// raw O_DIRECT read ceiling; each result a plain value with the figures
// the report prints.
#ifndef ENGRAM_BENCH_ENGRAM_BENCH_ENGRAM_BENCH_MEASURE_H_
#define ENGRAM_BENCH_ENGRAM_BENCH_ENGRAM_BENCH_MEASURE_H_

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/engram_bench/engram_bench_systems.h"
#include "bench/engram_bench/engram_bench_workload.h"
#include "bench/shard/bench_shard_measure.h"
#include "bench/shard/bench_shard_workload.h"

namespace engram::bench {

// One system on one stream over some connections, its rounds merged.
struct Measurement {
  std::string table;            // the table's label, e.g. "v41, in RAM"
  std::string stream;           // "decode B=256", "4 KiB reads"
  std::string system;           // "engram 1 shard", "raw O_DIRECT QD32"
  int connections = 0;          // 0 = in process
  double rows_per_request = 0;  // rows delivered per step (1 per disk read)
  double row_bytes = 0;
  bool has_server = false;
  bool server_in_process = false;
  LoopResult loop;
  SystemCounters served;

  double rows_per_second() const { return loop.requests_per_second() * rows_per_request; }
  double mb_per_second() const { return rows_per_second() * row_bytes / 1e6; }
  // Per request (step or read), milliseconds.
  double latency_ms(double q) const { return loop.latency_us.Percentile(q) / 1e3; }
  double rows() const { return static_cast<double>(loop.requests) * rows_per_request; }
  // CPU seconds per million delivered rows; -1 without a server.
  double server_cpu_per_mrow() const;
  double client_cpu_per_mrow() const;
  // Wire bytes (client sockets, both directions) per row that crossed it
  // (each distinct row of a step once); -1 for systems without a wire.
  double wire_bytes_per_row() const;
  // Rows the server read from disk per second (0 without tiers).
  double disk_rows_per_second() const {
    return loop.seconds > 0 ? served.disk_rows / loop.seconds : 0;
  }
};

struct RoundLimits {
  absl::Duration duration = absl::Seconds(3);  // per system, over all rounds
  absl::Duration warmup = absl::Milliseconds(300);
  int rounds = 4;
  uint64_t max_requests = 100000;  // per system, over all rounds
};

// Makes each system's fetcher (connections: its count; in-process systems
// are given 1 and reported as 0), warms them up, then runs `rounds` rounds
// of every system in turn, calling `after_round` (when set) after each
// round, so that a ceiling measured there alternates with the systems too.
// Every loop's last rows are checked against `table`; any wrong byte fails
// the measurement.
absl::StatusOr<std::vector<Measurement>> MeasureSystems(
    const std::string& table_label, std::span<BenchSystem* const> systems, const StepStream& stream,
    int connections, const RowArray& table, const RoundLimits& limits,
    const std::function<absl::Status()>& after_round = nullptr);

// `threads` threads of random 4 KiB O_DIRECT preads of `files` (the
// queue depth), for limits.duration (one round's share of it when called
// from MeasureSystems' `after_round`; merge the rounds with
// LoopResult::Merge).
absl::StatusOr<Measurement> MeasureRawDisk(const std::string& table_label,
                                           const std::vector<std::string>& files, int threads,
                                           const RoundLimits& limits);

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_ENGRAM_BENCH_ENGRAM_BENCH_MEASURE_H_

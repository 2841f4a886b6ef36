// engram-bench-client --table-over-ram: the table several times the
// shards' memory, each shard server in a memory cgroup capped at its
// --ram-budget plus a stated process overhead, its tail read from the disk
// with O_DIRECT; per budget, what the shards served from RAM and from the
// disk against the disk's own limit, the decode loop's fetch times and
// exposed wait, and beside each the capacity planner's prediction
// (shard/plan/tier_replay.h) for the very tokens the loop decoded.
//
// Per budget (a percent of the budget that holds a shard whole, as
// `engramctl plan --budgets` takes it) and per block time, fresh shard
// processes in fresh cgroups and a fresh client run `decode_steps` steps
// of `batch` sequences without prefill (so the replay, which decodes one
// token per sequence per step from position 0, sees the same Lookups).
// Before each budget, raw O_DIRECT 4 KiB reads over the shards' SST files
// at the shards' combined reader-thread depth measure the disk.
//
// The last lines of the report, one per budget, then one:
//   bench-tiers: budget_pct=P hit_ratio=H predicted_hit_ratio=H'
//       tail_reads_per_s=R disk_ratio=D exposed_wait_500us_pct=X
//   bench-tiers: planner_max_hit_error_pts=E
// H and R from the 500 us/block run (R: SST reads/s of all shards
// together; D = R / the raw reads/s), E the largest |H - H'| in points.
#ifndef ENGRAM_BENCH_CLIENT_BENCH_TIERS_H_
#define ENGRAM_BENCH_CLIENT_BENCH_TIERS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "bench/common/bench_client_setup.h"
#include "client/engram_client.h"
#include "common/format/table.h"
#include "inference/inference_loop.h"

namespace engram::bench {

struct TiersOptions {
  Workload workload;         // REQUIRED: its table, profile and workload traces
  const TokenTrace* trace;   // REQUIRED: the workload trace, loaded
  const TableReader* table;  // REQUIRED: for the loop's row checks
  std::string shard_binary;  // REQUIRED
  std::string log_dir;       // REQUIRED: shard stderr files and the replay's trace
  int shards = 3;
  std::vector<double> budget_pcts = {5, 10, 25, 50};
  std::vector<absl::Duration> block_times = {absl::Microseconds(100), absl::Microseconds(500)};
  int decode_steps = 300;
  int batch = 64;
  int blocks = 43;  // transformer blocks per step
  RowFormat format = RowFormat::kBf16;
  bool realtime = true;  // InferenceLoopOptions::realtime
  // Added to each shard's --ram-budget to make its cgroup's limit: what
  // the process holds besides its table (gRPC, threads' stacks, buffers,
  // glibc), which the report shows against each group's peak.
  uint64_t overhead_bytes = uint64_t{64} << 20;
  int reader_threads = 32;  // engram-shard --reader-threads (its default)
  absl::Duration raw_disk_time = absl::Seconds(3);
};

// Runs everything and prints the report on stdout. Errors (no memory
// cgroup, a shard that did not start or was killed at its limit, a loop
// error) name what failed.
absl::Status RunTableOverRam(const TiersOptions& options);

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_CLIENT_BENCH_TIERS_H_

// engram-bench-client --table-over-ram: the table several times the
// shards' memory, each shard server in a memory cgroup capped at its
// --ram-budget plus a stated process overhead, its tail read from the disk
// with O_DIRECT; per budget, what the shards served from RAM and from the
// disk against the disk's own limit, the decode loop's fetch times and
// exposed wait, and beside each the capacity planner's prediction
// (shard/plan/tier_replay.h) for the very tokens the loop decoded.
//
// First, a short run with every shard whole in RAM calibrates the request
// path: the median time from the end of Prefetch to the first layer's
// rows, which the planner's model takes as its round trip (the rows'
// transfer included). A second, at half the shard by frequency, calibrates
// the tail read: FitTailReads (shard/plan/tier_plan.h) of the layers'
// fetches against the replayed tail rows gives the model its disk latency
// and, as a share of the raw rate, its disk rate. Then per budget (a
// percent of the budget that holds a shard whole, as `engramctl plan
// --budgets` takes it), per placement policy and per block time, fresh
// shard processes in fresh cgroups and a fresh client run `decode_steps`
// steps of `batch` sequences without prefill (so the replay, which decodes
// one token per sequence per step from position 0, sees the same
// Lookups). The client sends each layer with
// its need-by (ClientOptions::block_time) once the one before it has
// arrived (pipeline_layers, the library's default; the planner models it as
// FetchOrder::kSequential), and the shards read their tails earliest
// need-by first. Policies:
//   window     the placement ChoosePlacement (shard/plan/placement.h)
//              picks for the budget and block time, written into each
//              shard's tier_plan.json before it starts;
//   frequency  no tier_plan.json: engram-shard's default.
// Before each budget, raw O_DIRECT 4 KiB reads over the shards' SST files
// at the shards' combined reader-thread depth measure the disk's rate (and
// at depth 1, its latency); the planner's model scales its fitted rate by
// it, and the lower bound (IdealExposedWaitPercent: each layer's tail read
// at the disk's raw rate and latency in deadline order from Prefetch, no
// round trip) takes both, each shard having a third of the one disk.
// Then the smallest budget the planner finds for an exposed wait of at
// most 1% at 500 us a block (SmallestBudgetForTarget), for each policy, is
// run too, and while a run misses 1%, budgets probe_step_pct larger, up to
// the whole shard.
//
// The last lines of the report, one per run, then two:
//   bench-tiers: budget_pct=P policy=window|frequency block_us=U
//       hit_ratio=H exposed_wait_pct=X bound_pct=B predicted_pct=Y
//   bench-tiers: planner_max_hit_error_pts=E
//   bench-tiers: budget_for_1pct_500us window=P1 frequency=P2
// X measured, B the bound, Y the planner's prediction (all % of decode
// step time), E the largest |H - predicted H| in points over the runs; P1
// and P2 the smallest budget run under that policy at 500 us whose
// measured exposed wait is <= 1%, or `none`.
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
  int shards = 3;            // shard servers the table is split over (--tiers-shards)
  std::vector<double> budget_pcts = {5, 10, 25, 50};
  // Run the planner's smallest budget for 1% at 500 us too, per policy,
  // and, while a run misses 1%, budgets this many points larger up to the
  // whole shard (0 = none).
  bool run_target_budgets = true;
  double probe_step_pct = 10;
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
  // Time reading the raw disk at the shards' depth before each budget, in two
  // passes (the better one counts).
  absl::Duration raw_disk_time = absl::Seconds(3);
};

// Runs everything and prints the report on stdout. Errors (no memory
// cgroup, a shard that did not start or was killed at its limit, a loop
// error) name what failed.
absl::Status RunTableOverRam(const TiersOptions& options);

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_CLIENT_BENCH_TIERS_H_

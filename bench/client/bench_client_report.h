// The runs of engram-bench-client and the report it prints on stdout.
#ifndef ENGRAM_BENCH_CLIENT_BENCH_CLIENT_REPORT_H_
#define ENGRAM_BENCH_CLIENT_BENCH_CLIENT_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "bench/common/bench_client_shards.h"
#include "inference/inference_loop.h"

namespace engram::bench {

// One configuration: fresh shard processes, a fresh client, one loop.
struct RunSpec {
  int shards = 3;
  absl::Duration block;  // simulated compute per block; zero = closed loop
  int decode_steps = 0;
  double local_cache_pct = 0;  // worker-side cache, percent of the table
  bool measure_skew = false;   // count the rows' frequencies (one run does)
};

struct RunOutcome {
  RunSpec spec;
  InferenceLoopResult loop;
  double shard_cpu_seconds = 0;     // all shard processes, decode steps
  TierRows tiers;                   // rows the shards served in the run
  uint64_t worker_cache_bytes = 0;  // what the client's cache holds
  uint64_t hot_bytes = 0;           // the shards' hot-tier budgets
};

// "3 shards, 500 us/block, local cache 1%".
std::string Describe(const RunSpec& spec);

// What the report's header says about the setup.
struct ReportSetup {
  std::string workload;
  uint64_t table_rows = 0;
  uint64_t table_bytes = 0;
  int64_t vocab = 0;
  double hot_pct = 0;
  std::string tail_format;  // the shards' tail, e.g. "cuckoo tail (read from its mapped files)"
  bool http2_bdp_probe = false;          // ClientOptions::http2_bdp_probe
  std::string transport = "row_stream";  // ClientOptions::transport
  int hot_cache_share = 20;              // the shards' --hot-cache-share, resolved
  std::vector<int64_t> layer_blocks;
  int blocks = 0;
  int batch = 0;
  int prefill = 0;
  double seconds = 0;       // wall time of the runs
  double load_average = 0;  // 1-minute load average before the runs
};

// The tables, then the last line
//   bench-client: exposed_wait_500us_pct=X exposed_wait_100us_pct=Y
// from the runs with the most shards and no local cache (-1 when missing).
void PrintReport(const ReportSetup& setup, const std::vector<RunOutcome>& runs);

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_CLIENT_BENCH_CLIENT_REPORT_H_

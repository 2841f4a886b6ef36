// The shard side of engram-bench-client: real engram-shard processes on
// 127.0.0.1 (testing::ShardProcess), stopped by this process whatever way it
// ends (destructor, error return, or a fatal signal once
// testing::InstallChildCleanup() has run).
#ifndef ENGRAM_BENCH_COMMON_BENCH_CLIENT_SHARDS_H_
#define ENGRAM_BENCH_COMMON_BENCH_CLIENT_SHARDS_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/common/cgroup.h"
#include "service/testing/shard_process.h"
#include "shard/footprint.h"

namespace engram::bench {

// Rows served, by tier (the servers' engram_shard_rows_total): Tiers()
// sums them over shards and layers.
struct TierRows {
  double pinned = 0, cached = 0, disk = 0;
  double total() const { return pinned + cached + disk; }
  // Share of rows served from RAM (pinned + admitted), percent.
  double hot_pct() const { return total() > 0 ? 100.0 * (pinned + cached) / total() : 0; }
};

// n shard processes, one per shard directory, each with a hot tier of
// `hot_share` of its rows' bytes and its stderr in LOG_DIR/shard-I-of-N.err.
class Deployment {
 public:
  struct Options {
    std::string binary;                   // engram-shard. REQUIRED.
    std::vector<std::string> shard_dirs;  // shard i first. REQUIRED.
    // --ram-budget: this share of the budget that holds the shard whole
    // (ShardFootprint::whole_shard_budget; 1 = every row pinned, 0 = no
    // budget), and at least its fixed bytes.
    double hot_share = 0.10;
    bool direct_io = true;                 // false: every process with --direct-io=false
    int reader_threads = 0;                // per shard; 0 = the server's default
    uint64_t worker_cache_bytes = 0;       // every process's --worker-cache-bytes
    std::optional<int> hot_cache_share;    // every process's --hot-cache-share; none = default
    std::string log_dir;                   // shard-I.err files. REQUIRED.
    std::vector<std::string> extra_flags;  // appended to every process's flags
    // When given, shard i starts inside memory cgroup cgroups[i] (not owned).
    std::vector<const MemoryCgroup*> cgroups;
  };
  static absl::StatusOr<std::unique_ptr<Deployment>> Start(const Options& options);

  int n_shards() const { return static_cast<int>(shards_.size()); }
  // "127.0.0.1:PORT", shard 0 first.
  std::vector<std::string> addresses() const;
  // Each shard's hot-row profile (for the client's local cache).
  const std::vector<std::string>& hot_profiles() const { return hot_profiles_; }
  const std::string& shard_map_path() const { return shard_map_path_; }
  // Sum of the shards' --ram-budget, bytes.
  uint64_t hot_bytes() const { return hot_bytes_; }
  // Each shard's footprint, measured before it started, shard 0 first.
  const std::vector<ShardFootprint>& footprints() const { return footprints_; }
  std::vector<pid_t> pids() const;
  // Each shard's /metrics port, shard 0 first.
  std::vector<int> metrics_ports() const;
  // The row stream ports of the shards that offer one.
  std::vector<int> stream_ports() const;
  double cpu_seconds() const;  // all shard processes
  absl::StatusOr<TierRows> Tiers() const;
  // Per shard, shard 0 first: rows served by tier, over all layers and per
  // Engram layer (the `layer` label; layer l's at layers[l], as many as
  // the shard reports, so `rows` is their sum), and RocksDB's SST reads
  // (engram_shard_rocksdb_file_reads), since the shard started.
  struct ShardCounters {
    TierRows rows;
    std::vector<TierRows> layers;
    double file_reads = 0;
  };
  absl::StatusOr<std::vector<ShardCounters>> Counters() const;

 private:
  Deployment() = default;
  std::vector<std::unique_ptr<testing::ShardProcess>> shards_;
  std::vector<std::string> hot_profiles_;
  std::string shard_map_path_;
  uint64_t hot_bytes_ = 0;
  std::vector<ShardFootprint> footprints_;
};

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_COMMON_BENCH_CLIENT_SHARDS_H_

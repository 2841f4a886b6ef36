// The shard side of engram-bench-client: real engram-shard processes on
// 127.0.0.1, started with fork/exec and stopped by this process whatever
// way it ends (destructor, error return, or a fatal signal once
// InstallChildCleanup() has run).
#ifndef ENGRAM_BENCH_BENCH_CLIENT_SHARDS_H_
#define ENGRAM_BENCH_BENCH_CLIENT_SHARDS_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace engram::bench {

// Installs handlers for SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGSEGV and
// SIGABRT that SIGKILL every live ShardProcess, reap them, and then die of
// the same signal. Call once, before starting any process.
void InstallChildCleanup();

// One engram-shard process serving a shard directory on 127.0.0.1 (free
// gRPC and /metrics ports). Its stderr goes to `log_path`. Start() returns
// once the process has printed its serving line; the destructor sends
// SIGTERM, waits up to 10 s for the exit, then SIGKILLs. Not thread-safe.
class ShardProcess {
 public:
  struct Options {
    std::string binary;         // the engram-shard executable. REQUIRED.
    std::string db_dir;         // shard directory. REQUIRED.
    uint64_t ram_budget_bytes = 0;
    int reader_threads = 0;     // --reader-threads; 0 = the server's default
    uint64_t worker_cache_bytes = 0;  // --worker-cache-bytes
    int hot_cache_share = -1;   // --hot-cache-share; -1 = the server's default
    bool direct_io = false;     // --direct-io
    bool map_tail = true;       // false: --map-cuckoo-tail=false
    std::string log_path = "/dev/null";
    absl::Duration start_timeout = absl::Seconds(60);
  };
  // Unavailable (with the log's last line) when the process exits or does
  // not serve within start_timeout.
  static absl::StatusOr<std::unique_ptr<ShardProcess>> Start(const Options& options);
  ~ShardProcess();
  ShardProcess(const ShardProcess&) = delete;
  ShardProcess& operator=(const ShardProcess&) = delete;

  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  // The row stream's port, or -1 when it is off.
  int stream_port() const { return stream_port_; }
  // User + system CPU seconds the process has used (/proc/PID/stat).
  double cpu_seconds() const;

 private:
  ShardProcess(pid_t pid, int stdout_fd) : pid_(pid), stdout_fd_(stdout_fd) {}
  absl::StatusOr<std::string> ReadServingLine(absl::Duration timeout);

  pid_t pid_;
  int stdout_fd_;
  int port_ = 0;
  int metrics_port_ = 0;
  int stream_port_ = -1;
};

// Rows a deployment served since its start, by tier, summed over shards
// and layers (the servers' engram_shard_rows_total).
struct TierRows {
  double pinned = 0, cached = 0, disk = 0;
  double total() const { return pinned + cached + disk; }
  // Share of rows served from RAM (pinned + admitted), percent.
  double hot_pct() const { return total() > 0 ? 100.0 * (pinned + cached) / total() : 0; }
};

// n shard processes, one per shard directory, each with a hot tier of
// `hot_share` of its rows' bytes.
class Deployment {
 public:
  struct Options {
    std::string binary;                   // engram-shard. REQUIRED.
    std::vector<std::string> shard_dirs;  // shard i first. REQUIRED.
    double hot_share = 0.10;              // --ram-budget / shard row bytes
    bool direct_io = false;               // every process with --direct-io
    int reader_threads = 0;               // per shard; 0 = the server's default
    uint64_t worker_cache_bytes = 0;      // every process's --worker-cache-bytes
    int hot_cache_share = -1;             // every process's --hot-cache-share; -1 = default
    bool map_tail = true;                 // false: every process with --map-cuckoo-tail=false
    std::string log_dir;                  // shard-I.err files. REQUIRED.
  };
  static absl::StatusOr<std::unique_ptr<Deployment>> Start(const Options& options);

  int n_shards() const { return static_cast<int>(shards_.size()); }
  // "127.0.0.1:PORT", shard 0 first.
  std::vector<std::string> addresses() const;
  // Each shard's hot-row profile (for the client's local cache).
  const std::vector<std::string>& hot_profiles() const { return hot_profiles_; }
  const std::string& shard_map_path() const { return shard_map_path_; }
  // Sum of the hot-tier budgets, bytes.
  uint64_t hot_bytes() const { return hot_bytes_; }
  std::vector<pid_t> pids() const;
  // Each shard's /metrics port, shard 0 first.
  std::vector<int> metrics_ports() const;
  // The row stream ports of the shards that offer one.
  std::vector<int> stream_ports() const;
  double cpu_seconds() const;  // all shard processes
  absl::StatusOr<TierRows> Tiers() const;

 private:
  Deployment() = default;
  std::vector<std::unique_ptr<ShardProcess>> shards_;
  std::vector<std::string> hot_profiles_;
  std::string shard_map_path_;
  uint64_t hot_bytes_ = 0;
};

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_BENCH_CLIENT_SHARDS_H_

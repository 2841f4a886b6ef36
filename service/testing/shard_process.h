// One engram-shard daemon run as a child process on 127.0.0.1, for tests and
// benchmarks: started on free ports, ready once it prints its serving line,
// stopped with SIGTERM. Test-only (library engram_server_testing).
#ifndef ENGRAM_SERVICE_TESTING_SHARD_PROCESS_H_
#define ENGRAM_SERVICE_TESTING_SHARD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/testing/child_process.h"

namespace engram::testing {

// Start() runs `BINARY --db DB --listen 127.0.0.1:0 --metrics-port 0
// FLAGS...` and returns once the daemon has printed
//   engram-shard: serving shard I/K of TABLE vV on HOST:PORT (metrics :M) [(row stream :S)]
// The destructor stops it (SIGTERM, SIGKILL after 10 s). Not thread-safe.
class ShardProcess {
 public:
  struct Options {
    std::string binary;              // the engram-shard executable. REQUIRED.
    std::string db_dir;              // the shard directory. REQUIRED.
    std::vector<std::string> flags;  // further flags, e.g. {"--ram-budget", "64K"}
    // The daemon's stderr goes here (truncated first) when non-empty;
    // otherwise it is this process's stderr.
    std::string stderr_path;
    bool die_with_parent = false;  // see ChildOptions::die_with_parent
    int cgroup_procs_fd = -1;      // see ChildOptions::cgroup_procs_fd
    absl::Duration start_timeout = absl::Seconds(60);
  };
  // Unavailable when the daemon exits or does not serve within
  // start_timeout (with the last line of its stderr when it is in a file);
  // Internal when its first line is not the serving line.
  static absl::StatusOr<std::unique_ptr<ShardProcess>> Start(const Options& options);
  ~ShardProcess();
  ShardProcess(const ShardProcess&) = delete;
  ShardProcess& operator=(const ShardProcess&) = delete;

  pid_t pid() const { return child_->pid(); }
  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  // The row stream's port, or -1 when it is off.
  int stream_port() const { return stream_port_; }
  std::string address() const;  // "127.0.0.1:PORT"
  const std::string& serving_line() const { return serving_line_; }

  void Signal(int sig) { child_->Signal(sig); }
  bool Running() { return child_->Running(); }
  // Waits for the exit; the raw wait status.
  int Wait() { return child_->Wait(); }
  // SIGTERM, then SIGKILL after `grace`; the raw wait status.
  int Stop(absl::Duration grace = absl::Seconds(10)) { return child_->Stop(grace); }

 private:
  explicit ShardProcess(std::unique_ptr<ChildProcess> child) : child_(std::move(child)) {}

  std::unique_ptr<ChildProcess> child_;
  std::string serving_line_;
  int port_ = 0;
  int metrics_port_ = 0;
  int stream_port_ = -1;
};

}  // namespace engram::testing

#endif  // ENGRAM_SERVICE_TESTING_SHARD_PROCESS_H_

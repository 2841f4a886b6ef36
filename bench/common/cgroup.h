// A memory cgroup for one child process: the benchmarks run each shard
// server capped at its RAM budget plus a stated overhead, so the table's
// tail must come from the disk.
//
// cgroup v2 (memory.max, memory.peak) when the unified hierarchy has the
// memory controller, else cgroup v1 (memory.limit_in_bytes,
// memory.max_usage_in_bytes): version() says which. The group is made
// under this process's own memory cgroup and removed by the destructor
// (once its processes have exited). Needs root, or a delegated hierarchy.
// Not thread-safe.
#ifndef ENGRAM_BENCH_COMMON_CGROUP_H_
#define ENGRAM_BENCH_COMMON_CGROUP_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace engram::bench {

class MemoryCgroup {
 public:
  // FailedPrecondition (saying why) when no writable memory controller is
  // mounted.
  static absl::StatusOr<std::unique_ptr<MemoryCgroup>> Create(const std::string& name,
                                                              uint64_t limit_bytes);
  ~MemoryCgroup();
  MemoryCgroup(const MemoryCgroup&) = delete;
  MemoryCgroup& operator=(const MemoryCgroup&) = delete;

  // The group's cgroup.procs, open for writing: a child that writes "0"
  // to it before exec starts inside the group (ChildOptions::
  // cgroup_procs_fd). Owned by the group.
  int procs_fd() const { return procs_fd_; }

  uint64_t limit_bytes() const { return limit_; }
  // Bytes charged now, and the most charged since Create (page cache
  // included).
  uint64_t usage_bytes() const;
  uint64_t peak_bytes() const;
  // Anonymous and file-backed (page cache) bytes charged now (memory.stat:
  // v1 rss and cache, v2 anon and file).
  uint64_t anon_bytes() const;
  uint64_t file_bytes() const;
  // Times the limit was hit (v1 memory.failcnt; v2 memory.events "max").
  uint64_t limit_hits() const;
  // "cgroup v1 (memory.limit_in_bytes)" or "cgroup v2 (memory.max)".
  std::string version() const;
  const std::string& path() const { return path_; }

 private:
  MemoryCgroup(std::string path, bool v2, uint64_t limit)
      : path_(std::move(path)), v2_(v2), limit_(limit) {}
  uint64_t ReadNumber(const std::string& file) const;
  uint64_t StatValue(const std::string& key) const;

  std::string path_;  // the group's directory
  bool v2_;
  uint64_t limit_;
  int procs_fd_ = -1;
};

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_COMMON_CGROUP_H_

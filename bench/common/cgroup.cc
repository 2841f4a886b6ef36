#include "bench/common/cgroup.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace engram::bench {
namespace {

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

absl::Status WriteValue(const std::string& path, const std::string& value) {
  std::ofstream out(path);
  out << value;
  out.flush();
  if (!out) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", value, " to ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Where a hierarchy is mounted: the first mountinfo entry of file system
// type `fstype` whose super options include `option` (empty: any).
std::string MountPoint(const std::string& fstype, const std::string& option) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // ... mount-point ... - fstype source super-options
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::vector<std::string> head = absl::StrSplit(line.substr(0, dash), ' ');
    std::vector<std::string> tail = absl::StrSplit(line.substr(dash + 3), ' ');
    if (head.size() < 5 || tail.size() < 3 || tail[0] != fstype) continue;
    if (!option.empty()) {
      bool has = false;
      for (absl::string_view o : absl::StrSplit(tail[2], ',')) has |= o == option;
      if (!has) continue;
    }
    return head[4];
  }
  return "";
}

// This process's group in the hierarchy whose /proc/self/cgroup line has
// `controllers` ("memory" for v1, "" for v2's "0::" line).
std::string OwnGroup(const std::string& controllers) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    if (controllers.empty() ? f[0] == "0" : absl::StrContains(f[1], controllers)) return f[2];
  }
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<MemoryCgroup>> MemoryCgroup::Create(const std::string& name,
                                                                   uint64_t limit_bytes) {
  namespace fs = std::filesystem;
  std::string root, own;
  bool v2 = false;
  const std::string unified = MountPoint("cgroup2", "");
  if (!unified.empty() &&
      absl::StrContains(ReadFirstLine(unified + "/cgroup.controllers"), "memory")) {
    root = unified;
    own = OwnGroup("");
    v2 = true;
  } else {
    root = MountPoint("cgroup", "memory");
    own = OwnGroup("memory");
  }
  if (root.empty()) {
    return absl::FailedPreconditionError(
        "no memory cgroup controller is mounted (neither cgroup v2 with memory nor v1 memory)");
  }
  const std::string path = absl::StrCat(root, own == "/" ? "" : own, "/", name);
  std::error_code ec;
  fs::create_directory(path, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot make the memory cgroup ", path, ": ", ec.message(), " (run as root)"));
  }
  std::unique_ptr<MemoryCgroup> g(new MemoryCgroup(path, v2, limit_bytes));
  const absl::Status s =
      WriteValue(path + (v2 ? "/memory.max" : "/memory.limit_in_bytes"), absl::StrCat(limit_bytes));
  if (!s.ok()) return s;
  g->procs_fd_ = ::open((path + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  if (g->procs_fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open ", path, "/cgroup.procs: ", std::strerror(errno)));
  }
  return g;
}

MemoryCgroup::~MemoryCgroup() {
  if (procs_fd_ >= 0) ::close(procs_fd_);
  // The group's processes have been stopped; their exit may lag a little.
  for (int i = 0; i < 50 && ::rmdir(path_.c_str()) != 0 && errno == EBUSY; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
}

uint64_t MemoryCgroup::ReadNumber(const std::string& file) const {
  uint64_t v = 0;
  return absl::SimpleAtoi(ReadFirstLine(path_ + "/" + file), &v) ? v : 0;
}

uint64_t MemoryCgroup::usage_bytes() const {
  return ReadNumber(v2_ ? "memory.current" : "memory.usage_in_bytes");
}

uint64_t MemoryCgroup::peak_bytes() const {
  return ReadNumber(v2_ ? "memory.peak" : "memory.max_usage_in_bytes");
}

uint64_t MemoryCgroup::StatValue(const std::string& key) const {
  std::ifstream in(path_ + "/memory.stat");
  std::string k;
  uint64_t value = 0;
  while (in >> k >> value) {
    if (k == key) return value;
  }
  return 0;
}

uint64_t MemoryCgroup::anon_bytes() const { return StatValue(v2_ ? "anon" : "rss"); }
uint64_t MemoryCgroup::file_bytes() const { return StatValue(v2_ ? "file" : "cache"); }

uint64_t MemoryCgroup::limit_hits() const {
  if (!v2_) return ReadNumber("memory.failcnt");
  std::ifstream in(path_ + "/memory.events");
  std::string key;
  uint64_t value = 0;
  while (in >> key >> value) {
    if (key == "max") return value;
  }
  return 0;
}

std::string MemoryCgroup::version() const {
  return v2_ ? "cgroup v2 (memory.max)" : "cgroup v1 (memory.limit_in_bytes)";
}

}  // namespace engram::bench

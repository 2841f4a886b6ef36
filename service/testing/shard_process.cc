#include "service/testing/shard_process.h"

#include <signal.h>

#include <fstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/util/status_macros.h"

namespace engram::testing {
namespace {

constexpr char kServingPrefix[] = "engram-shard: serving shard ";

// The number right after `key` in `line`, or -1.
int NumberAfter(const std::string& line, const std::string& key) {
  const size_t at = line.find(key);
  if (at == std::string::npos) return -1;
  size_t end = at + key.size();
  while (end < line.size() && line[end] >= '0' && line[end] <= '9') ++end;
  int value = -1;
  if (!absl::SimpleAtoi(line.substr(at + key.size(), end - at - key.size()), &value)) {
    return -1;
  }
  return value;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShardProcess>> ShardProcess::Start(const Options& o) {
  std::vector<std::string> argv = {o.binary,      "--db",           o.db_dir, "--listen",
                                   "127.0.0.1:0", "--metrics-port", "0"};
  argv.insert(argv.end(), o.flags.begin(), o.flags.end());
  ChildOptions child_options;
  child_options.die_with_parent = o.die_with_parent;
  child_options.cgroup_procs_fd = o.cgroup_procs_fd;
  if (!o.stderr_path.empty()) {
    std::ofstream(o.stderr_path, std::ios::trunc);
    child_options.stderr_path = o.stderr_path;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ChildProcess> child, ChildProcess::Spawn(argv, child_options));
  std::unique_ptr<ShardProcess> p(new ShardProcess(std::move(child)));
  const auto why = [&o] {
    return o.stderr_path.empty() ? std::string("its stderr above says why")
                                 : absl::StrCat("its stderr: ", LastLineOf(o.stderr_path));
  };
  absl::StatusOr<std::string> line = p->child_->ReadLine(o.start_timeout);
  if (!line.ok()) {
    p->child_->Signal(SIGKILL);  // it may be stuck before serving
    return absl::UnavailableError(absl::StrCat(absl::StrJoin(argv, " "), " did not start serving (",
                                               line.status().message(), "); ", why()));
  }
  p->serving_line_ = *line;
  p->port_ = NumberAfter(*line, " on 127.0.0.1:");
  p->metrics_port_ = NumberAfter(*line, "(metrics :");
  p->stream_port_ = NumberAfter(*line, "(row stream :");
  if (line->rfind(kServingPrefix, 0) != 0 || p->port_ <= 0 || p->metrics_port_ <= 0) {
    p->child_->Signal(SIGKILL);
    return absl::InternalError(
        absl::StrCat("unexpected first line from ", o.binary, ": ", *line, "; ", why()));
  }
  return p;
}

ShardProcess::~ShardProcess() { child_->Stop(absl::Seconds(10)); }

std::string ShardProcess::address() const { return absl::StrCat("127.0.0.1:", port_); }

}  // namespace engram::testing

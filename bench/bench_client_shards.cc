#include "bench/bench_client_shards.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/proc_stat.h"
#include "common/metrics/scrape.h"
#include "shard/shard_format.h"
#include "shard/shard_map.h"

namespace engram::bench {
namespace {

// Live children, for the fatal-signal handler (lock-free slots).
constexpr int kMaxChildren = 64;
std::atomic<pid_t> g_children[kMaxChildren];

void RegisterChild(pid_t pid) {
  for (std::atomic<pid_t>& slot : g_children) {
    pid_t empty = 0;
    if (slot.compare_exchange_strong(empty, pid)) return;
  }
}

void UnregisterChild(pid_t pid) {
  for (std::atomic<pid_t>& slot : g_children) {
    pid_t p = pid;
    if (slot.compare_exchange_strong(p, 0)) return;
  }
}

// Async-signal-safe: kill, waitpid, signal and raise only.
void KillChildrenAndDie(int sig) {
  for (std::atomic<pid_t>& slot : g_children) {
    const pid_t p = slot.exchange(0);
    if (p > 0) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

// The number after `key` in `line`, or -1.
int NumberAfter(const std::string& line, const std::string& key) {
  const size_t at = line.find(key);
  if (at == std::string::npos) return -1;
  size_t end = at + key.size();
  while (end < line.size() && line[end] >= '0' && line[end] <= '9') ++end;
  int value = -1;
  if (!absl::SimpleAtoi(line.substr(at + key.size(), end - at - key.size()), &value)) return -1;
  return value;
}

std::string LastLine(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last.empty() ? "(nothing on stderr)" : last;
}

// Bytes of the rows shard `dir` holds, counted as the hot tier counts them
// (every row at the largest row size of the table).
absl::StatusOr<uint64_t> ShardRowBytes(const std::string& dir, ShardMap* map_out) {
  absl::StatusOr<ShardMap> map = ShardMap::Load(dir + "/shard_map.json");
  if (!map.ok()) return map.status();
  absl::StatusOr<ShardInfo> info = ShardInfo::Load(absl::StrCat(dir, "/", kShardInfoFile));
  if (!info.ok()) return info.status();
  const uint32_t stride = *std::max_element(map->row_bytes.begin(), map->row_bytes.end());
  uint64_t rows = 0;
  for (uint32_t l = 0; l < map->layer_rows.size(); ++l) {
    rows += map->RowsOnShard(l, info->shard_index);
  }
  *map_out = *std::move(map);
  return rows * stride;
}

}  // namespace

void InstallChildCleanup() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGSEGV, SIGABRT}) {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = KillChildrenAndDie;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
  signal(SIGPIPE, SIG_IGN);
}

absl::StatusOr<std::unique_ptr<ShardProcess>> ShardProcess::Start(const Options& o) {
  std::vector<std::string> args = {
      o.binary,      "--db",     o.db_dir, "--listen",        "127.0.0.1:0",
      "--metrics-port", "0",     "--ram-budget", absl::StrCat(o.ram_budget_bytes),
      "--drain-timeout", "2s",
  };
  if (o.reader_threads > 0) {
    args.push_back("--reader-threads");
    args.push_back(absl::StrCat(o.reader_threads));
  }
  if (o.direct_io) args.push_back("--direct-io");
  if (!o.map_tail) args.push_back("--map-cuckoo-tail=false");
  if (o.hot_cache_share >= 0) {
    args.push_back("--hot-cache-share");
    args.push_back(absl::StrCat(o.hot_cache_share));
  }
  if (o.worker_cache_bytes > 0) {
    args.push_back("--worker-cache-bytes");
    args.push_back(absl::StrCat(o.worker_cache_bytes));
  }
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  const int log_fd = open(o.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("cannot write ", o.log_path));
  }
  // Between fork and exec only async-signal-safe calls: other threads
  // (gRPC's) may hold locks.
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  close(log_fd);
  if (pid < 0) {
    close(fds[0]);
    return absl::InternalError("fork failed");
  }
  RegisterChild(pid);
  std::unique_ptr<ShardProcess> p(new ShardProcess(pid, fds[0]));
  // "engram-shard: serving shard 0/3 of T v1 on 127.0.0.1:PORT (metrics :M) (row stream :S)"
  absl::StatusOr<std::string> line = p->ReadServingLine(o.start_timeout);
  if (!line.ok()) {
    return absl::UnavailableError(absl::StrCat(o.binary, " --db ", o.db_dir,
                                               " did not start serving (",
                                               line.status().message(),
                                               "); its stderr: ", LastLine(o.log_path)));
  }
  p->port_ = NumberAfter(*line, " on 127.0.0.1:");
  p->metrics_port_ = NumberAfter(*line, "(metrics :");
  p->stream_port_ = NumberAfter(*line, "(row stream :");
  if (p->port_ <= 0 || p->metrics_port_ <= 0) {
    return absl::InternalError("unexpected serving line from engram-shard: " + *line);
  }
  return p;
}

absl::StatusOr<std::string> ShardProcess::ReadServingLine(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string buffered;
  while (true) {
    const size_t nl = buffered.find('\n');
    if (nl != std::string::npos) return buffered.substr(0, nl);
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("timed out");
    pollfd pfd{stdout_fd_, POLLIN, 0};
    const int r = poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (r < 0 && errno != EINTR) return absl::InternalError("poll failed");
    if (r <= 0) continue;
    char buf[512];
    const ssize_t n = read(stdout_fd_, buf, sizeof(buf));
    if (n == 0) return absl::UnavailableError("it exited");
    if (n > 0) buffered.append(buf, static_cast<size_t>(n));
  }
}

ShardProcess::~ShardProcess() {
  kill(pid_, SIGTERM);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (waitpid(pid_, nullptr, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  UnregisterChild(pid_);
  close(stdout_fd_);
}

double ShardProcess::cpu_seconds() const { return ProcessCpuSeconds(pid_); }

absl::StatusOr<std::unique_ptr<Deployment>> Deployment::Start(const Options& o) {
  std::unique_ptr<Deployment> d(new Deployment());
  for (size_t i = 0; i < o.shard_dirs.size(); ++i) {
    const std::string& dir = o.shard_dirs[i];
    ShardMap map;
    absl::StatusOr<uint64_t> bytes = ShardRowBytes(dir, &map);
    if (!bytes.ok()) return bytes.status();
    ShardProcess::Options po;
    po.binary = o.binary;
    po.db_dir = dir;
    po.ram_budget_bytes =
        static_cast<uint64_t>(std::llround(o.hot_share * static_cast<double>(*bytes)));
    po.reader_threads = o.reader_threads;
    po.worker_cache_bytes = o.worker_cache_bytes;
    po.hot_cache_share = o.hot_cache_share;
    po.direct_io = o.direct_io;
    po.map_tail = o.map_tail;
    po.log_path = absl::StrCat(o.log_dir, "/shard-", i, "-of-", o.shard_dirs.size(), ".err");
    absl::StatusOr<std::unique_ptr<ShardProcess>> p = ShardProcess::Start(po);
    if (!p.ok()) return p.status();
    d->shards_.push_back(*std::move(p));
    d->hot_profiles_.push_back(absl::StrCat(dir, "/", kHotProfileFile));
    d->hot_bytes_ += po.ram_budget_bytes;
  }
  if (!o.shard_dirs.empty()) d->shard_map_path_ = o.shard_dirs[0] + "/shard_map.json";
  return d;
}

std::vector<std::string> Deployment::addresses() const {
  std::vector<std::string> out;
  for (const auto& s : shards_) out.push_back(absl::StrCat("127.0.0.1:", s->port()));
  return out;
}

std::vector<pid_t> Deployment::pids() const {
  std::vector<pid_t> out;
  for (const auto& s : shards_) out.push_back(s->pid());
  return out;
}

std::vector<int> Deployment::metrics_ports() const {
  std::vector<int> out;
  for (const auto& s : shards_) out.push_back(s->metrics_port());
  return out;
}

std::vector<int> Deployment::stream_ports() const {
  std::vector<int> out;
  for (const auto& s : shards_) {
    if (s->stream_port() > 0) out.push_back(s->stream_port());
  }
  return out;
}

double Deployment::cpu_seconds() const {
  double sum = 0;
  for (const auto& s : shards_) sum += s->cpu_seconds();
  return sum;
}

absl::StatusOr<TierRows> Deployment::Tiers() const {
  TierRows t;
  for (const auto& s : shards_) {
    absl::StatusOr<metrics::HttpResponse> r = metrics::HttpGet(s->metrics_port(), "/metrics");
    if (!r.ok()) return r.status();
    const std::vector<metrics::Sample> samples = metrics::ParseSamples(r->body);
    t.pinned += metrics::SumSamples(samples, "engram_shard_rows_total", {{"tier", "pinned"}});
    t.cached += metrics::SumSamples(samples, "engram_shard_rows_total", {{"tier", "cached"}});
    t.disk += metrics::SumSamples(samples, "engram_shard_rows_total", {{"tier", "disk"}});
  }
  return t;
}

}  // namespace engram::bench

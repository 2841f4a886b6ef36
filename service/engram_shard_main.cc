// engram-shard: serves one shard directory (from `engramctl import`) over
// gRPC until SIGTERM or SIGINT, then drains in-flight calls and exits 0.
//
//   engram-shard --db DIR [--flag=value ...]
//
// `engram-shard --help` lists every flag with its default (the defaults of
// ShardServerOptions); docs/operating.md has the same table.
//
// Once serving it prints one line to stdout, with the bound ports (so
// --listen HOST:0 picks a free port), "(metrics off)" without --metrics-port
// and "(row stream off)" with --stream-port -1:
//   engram-shard: serving shard I/K of TABLE vV on HOST:PORT (metrics :MPORT) (row stream :SPORT)
// Exit status: 0 after a clean shutdown, 2 for bad flag values (1 for flags
// Abseil itself rejects), 1 when the shard cannot be served (bad data,
// address in use); one line on stderr says why.
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/util/flags.h"
#include "common/util/log.h"
#include "service/shard_server.h"

// Every default is ShardServerOptions' (service/shard_server.h).
static const engram::ShardServerOptions kDefaults;

namespace {

// The glibc malloc settings the daemon runs with (docs/reliability.md,
// "Soak"):
//
// - glibc.malloc.tcache_count=0. glibc keeps freed small chunks in a cache
//   per thread (its tcache: up to 7 per size class). A shard runs ~50
//   threads (32 RocksDB readers), whose caches fill for many minutes as they
//   meet new allocation sizes: anonymous memory rose from 7 to 21 MiB over a
//   10-minute soak, held but unused, and stayed at 7 MiB with the cache off.
// - glibc.malloc.mmap_threshold=131072, a fixed threshold. By default glibc
//   raises its mmap threshold to the size of each mapped block freed (up to
//   32 MiB) and its trim threshold to twice that; blocks below the raised
//   threshold then come from the arena of the thread that asks, and once
//   freed stay resident at that arena's top: free() trims it only above the
//   raised trim threshold, malloc_trim() not at all (it trims the main
//   arena's top alone). A table version switch frees the old version's
//   blocks (its RocksDB statistics, ~235 KiB a core; its admission cache;
//   its scrubber's read-ahead) in the arenas of the gRPC thread that ran
//   Activate and of the old store's threads, and the new version's threads
//   and Activate land in other arenas (16 on 2 cores): anonymous memory grew
//   by ~1 MiB a switch, 10.7 to 14.3 MiB over four, while glibc's bytes in
//   use stayed at 2.4 MiB. With the threshold fixed, blocks of 128 KiB and
//   more are mapped on their own and unmapped when freed, and arena tops
//   are trimmed above 128 KiB: 8.9 to 9.0 MiB over the same four. Serving
//   allocates no such blocks; the scrubber's disk walk maps and unmaps its
//   read-ahead buffers at each step.
//
// The thread caches can only be turned off when a process starts, so the
// daemon executes itself once more with the settings added to
// GLIBC_TUNABLES, each unless the environment already sets that tunable.
// Returns only when it does not re-execute (or the exec failed: then nothing
// changed but the environment, which is restored).
void ExecWithMallocTunables(char** argv) {
  constexpr std::pair<const char*, const char*> kTunables[] = {
      {"glibc.malloc.tcache_count", "0"},
      {"glibc.malloc.mmap_threshold", "131072"},
  };
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  const std::string current = tunables == nullptr ? "" : tunables;
  std::string next = current;
  for (const auto& [name, value] : kTunables) {
    if (current.find(name) != std::string::npos) continue;
    absl::StrAppend(&next, next.empty() ? "" : ":", name, "=", value);
  }
  if (next == current) return;
  // The binary's own path, not /proc/self/exe, so the process keeps its
  // name (comm: ps, top, the kernel's OOM report) after the exec.
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return;
  self[n] = '\0';
  ::setenv("GLIBC_TUNABLES", next.c_str(), 1);
  ::execv(self, argv);
  if (tunables == nullptr) {
    ::unsetenv("GLIBC_TUNABLES");
  } else {
    ::setenv("GLIBC_TUNABLES", current.c_str(), 1);
  }
}

// A flag's default from its option field: -1 for an empty optional.
template <typename T>
const T& FlagDefault(const T& field) {
  return field;
}
int32_t FlagDefault(const std::optional<int>& field) { return field.value_or(-1); }

// A flag's value into its option field: -1 empties an optional one (other
// values, negative ones too, are set and left to Validate).
template <typename T, typename F>
void SetOption(T* field, const F& value) {
  *field = value;
}
void SetOption(std::optional<int>* field, int32_t value) {
  if (value == -1) {
    field->reset();
  } else {
    *field = value;
  }
}

}  // namespace

// Flags that set the ShardServerOptions field of the same meaning:
// X(type, flag, field, help), the default the field's; -1 on the command
// line is an empty optional field (no port, automatic threads).
#define ENGRAM_SHARD_FLAGS(X)                                                         \
  X(std::string, db, db_dir, "shard directory written by `engramctl import`")         \
  X(std::string, versions_dir, versions_dir,                                          \
    "where EngramAdmin/Activate(N) finds table version N, as DIR/vN (empty = the "    \
    "parent of --db)")                                                                \
  X(std::string, listen, listen, "gRPC address HOST:PORT (port 0 = pick a free one)") \
  X(int32_t, metrics_port, metrics_port,                                              \
    "Prometheus /metrics port on the listen host (-1 = off, 0 = any)")                \
  X(int32_t, stream_port, stream_port,                                                \
    "row stream port on the listen host: Lookup framed on plain TCP, the "            \
    "clients' fast path, advertised by Info (-1 = off, 0 = any)")                     \
  X(int32_t, stream_advertise_port, stream_advertise_port,                            \
    "the row stream port Info advertises, behind a port mapping (0 = the bound one)") \
  X(int32_t, hot_cache_share, hot_cache_share_percent,                                \
    "with a hot-row profile, percent of --ram-budget kept for the admission cache "   \
    "(the rest is pinned from the profile; 0 = all pinned)")                          \
  X(std::string, hot_profile, hot_profile_path,                                       \
    "hot-row profile (default: DB/hot_profile.bin when present)")                     \
  X(std::string, tier_plan, tier_plan_path,                                           \
    "hot-tier placement, tier_plan.json from engramctl plan --write-tier-plan "       \
    "(default: DB/tier_plan.json when present; none = frequency policy)")             \
  X(int32_t, threads, threads,                                                        \
    "max threads for gRPC's synchronous services (reflection; Lookup runs on "        \
    "gRPC's callback pool)")                                                          \
  X(int32_t, reader_threads, reader_threads, "RocksDB reader threads")                \
  X(int32_t, later_read_depth, later_read_depth,                                      \
    "tail reads of later need-bys in flight while one of the earliest is waiting "    \
    "or read (1..1024)")                                                              \
  X(int32_t, gather_threads, gather_threads,                                          \
    "helper threads copying shares of a large request's hot rows (0 = none, "         \
    "-1 = one on machines with 2 cores or more)")                                     \
  X(bool, direct_io, direct_io,                                                       \
    "read a block tail with O_DIRECT (no page cache outside --ram-budget); false = "  \
    "through the page cache")                                                         \
  X(bool, uring_reads, uring_reads,                                                   \
    "with --direct-io, read each MultiGet's blocks through io_uring, all at once "    \
    "(false = one read after another per reader thread)")                             \
  X(uint32_t, max_rows_per_request, max_rows_per_request,                             \
    "Lookups with more row ids fail with RESOURCE_EXHAUSTED")                         \
  X(absl::Duration, drain_timeout, drain_timeout,                                     \
    "on SIGTERM/SIGINT, how long in-flight calls may take to finish")                 \
  X(int32_t, max_inflight_requests, max_inflight_requests,                            \
    "Lookups in flight at once (gRPC and row stream); more get RESOURCE_EXHAUSTED "   \
    "(0 = no limit)")                                                                 \
  X(int32_t, max_inflight_per_connection, max_inflight_per_connection,                \
    "Lookups in flight on one row stream connection before its next request waits "   \
    "in the socket")                                                                  \
  X(absl::Duration, stream_idle_timeout, stream_idle_timeout,                         \
    "a row stream connection silent this long is closed")                             \
  X(std::string, metrics_host, metrics_host,                                          \
    "host /metrics binds (empty = the --listen host; 127.0.0.1 = this machine only)") \
  X(std::string, tls_cert, tls_cert_file,                                             \
    "TLS certificate chain (PEM) for gRPC and the row stream; needs --tls-key")       \
  X(std::string, tls_key, tls_key_file, "TLS private key (PEM) of --tls-cert")        \
  X(std::string, tls_ca, tls_ca_file,                                                 \
    "CA (PEM) client certificates must chain to: mutual TLS (needs --tls-cert)")      \
  X(std::string, auth_token_file, auth_token_file,                                    \
    "file whose first line is the bearer token every Lookup and Info must carry")     \
  X(std::string, admin_token_file, admin_token_file,                                  \
    "file whose first line is the bearer token of the admin RPCs")

// Byte sizes, strings with suffixes K, M, G, T (ParseByteSize): X(flag,
// field, help).
#define ENGRAM_SHARD_BYTE_FLAGS(X)                                                        \
  X(ram_budget, ram_budget_bytes,                                                         \
    "the shard's RAM for its table in bytes: RocksDB's index, then the hot tier "         \
    "(0 = no hot tier); suffixes K, M, G, T (binary)")                                    \
  X(worker_cache_bytes, worker_cache_bytes,                                               \
    "RAM the workers' local caches hold for the whole table (their "                      \
    "worker_cache_bytes): those hottest rows are not pinned here; suffixes K, M, G, T")   \
  X(scrub_pinned_bytes_per_second, scrub_pinned_bytes_per_second,                         \
    "pinned rows re-checked against their checksums per second, bytes; suffixes K, M, G " \
    "(0 = off)")                                                                          \
  X(scrub_disk_bytes_per_second, scrub_disk_bytes_per_second,                             \
    "rows read back from disk and checked against shard.json per second, bytes; "         \
    "suffixes K, M, G (0 = off)")

#define ENGRAM_DEFINE_FLAG(type, flag, field, help) \
  ABSL_FLAG(type, flag, FlagDefault(kDefaults.field), help);
#define ENGRAM_DEFINE_BYTE_FLAG(flag, field, help) \
  ABSL_FLAG(std::string, flag, absl::StrCat(kDefaults.field), help);
ENGRAM_SHARD_FLAGS(ENGRAM_DEFINE_FLAG)
ENGRAM_SHARD_BYTE_FLAGS(ENGRAM_DEFINE_BYTE_FLAG)

namespace {

constexpr char kUsage[] =
    "engram-shard --db DIR [--flag=value ...]\n"
    "Serves one shard of an Engram table over gRPC (engram.v1.EngramStore) and\n"
    "the row stream; every flag, with its default, is listed below and in\n"
    "docs/operating.md. Flags may be spelled with dashes or underscores.";

// "ram_budget" -> "ram-budget", as users spell flags.
std::string DashedName(const char* flag) { return absl::StrReplaceAll(flag, {{"_", "-"}}); }

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "engram-shard: %s\n", message.c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  ExecWithMallocTunables(argv);
  // Debian's abseil is built with deadlock detection on, which makes every
  // Mutex (gRPC core creates several per call) maintain a lock graph.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::SetProgramUsageMessage(kUsage);
  std::vector<char*> positional = engram::ParseFlags(argc, argv);
  if (positional.size() > 1) {
    return Fail(2, absl::StrCat("unexpected argument '", positional[1],
                                "'; pass the shard directory as --db DIR"));
  }
  if (absl::GetFlag(FLAGS_db).empty()) {
    return Fail(2, "no shard directory: pass --db DIR (from engramctl import)");
  }
  engram::ShardServerOptions options;
#define ENGRAM_COPY_FLAG(type, flag, field, help) \
  SetOption(&options.field, absl::GetFlag(FLAGS_##flag));
  ENGRAM_SHARD_FLAGS(ENGRAM_COPY_FLAG)
  // The byte sizes; the first bad one fails.
  std::string bad;
#define ENGRAM_COPY_BYTE_FLAG(flag, field, help)                                                  \
  if (absl::StatusOr<uint64_t> v = engram::ParseByteSize(absl::GetFlag(FLAGS_##flag)); !v.ok()) { \
    if (bad.empty()) bad = absl::StrCat("--", DashedName(#flag), ": ", v.status().message());     \
  } else {                                                                                        \
    options.field = *v;                                                                           \
  }
  ENGRAM_SHARD_BYTE_FLAGS(ENGRAM_COPY_BYTE_FLAG)
  if (!bad.empty()) return Fail(2, bad);

  // Block the shutdown signals before any thread exists, so every thread
  // inherits the mask and only sigwait() below sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  if (absl::Status s = options.Validate(); !s.ok()) {
    return Fail(2, std::string(s.message()));
  }
  auto server = engram::ShardServer::Start(options);
  if (!server.ok()) return Fail(1, std::string(server.status().message()));
  engram::LogLine('I', absl::StrCat("engram-shard: tail rows read by ", (*server)->tail_access()));
  const engram::ShardMap map = (*server)->shard_map();
  const int metrics_port = (*server)->metrics_port();
  const int stream_port = (*server)->stream_port();
  std::printf(
      "engram-shard: serving shard %u/%u of %s v%llu on %s:%d %s %s\n", (*server)->shard_index(),
      map.n_shards, map.table.c_str(), static_cast<unsigned long long>(map.version),
      (*server)->listen_host().c_str(), (*server)->port(),
      metrics_port >= 0 ? absl::StrCat("(metrics :", metrics_port, ")").c_str() : "(metrics off)",
      stream_port >= 0 ? absl::StrCat("(row stream :", stream_port, ")").c_str()
                       : "(row stream off)");
  std::fflush(stdout);

  int received = 0;
  sigwait(&signals, &received);
  engram::LogLine(
      'I', absl::StrCat("engram-shard: ", strsignal(received), "; draining in-flight calls"));
  (*server)->Shutdown(options.drain_timeout);
  server->reset();
  engram::LogLine('I', "engram-shard: stopped");
  return 0;
}

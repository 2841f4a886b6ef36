// ShardServer: one shard of an Engram table served over gRPC.
//
// Start() opens the shard directory written by `engramctl import` (RowStore
// refuses data that does not match its shard map), builds the RAM hot tier,
// and starts a gRPC server with the callback API serving
// engram.v1.EngramStore (Lookup, Info), grpc.health.v1.Health and server
// reflection, the row stream (the same Lookup framed on plain TCP,
// service/stream_server.h), plus an optional Prometheus /metrics endpoint
// (prometheus-cpp: service/shard_metrics.h, service/shard_collectable.h).
// See service/store_service.h for how a Lookup is served.
//
//   ShardServerOptions options;
//   options.db_dir = "/data/shard-0";
//   auto server = ShardServer::Start(options);
//   if (!server.ok()) return server.status();
//   ... (*server)->port() ...
//   (*server)->Shutdown(absl::Seconds(10));   // drain, then stop
//
// Threading: port(), metrics_port(), shard_map() and shard_index() may be
// called from any thread; Shutdown() and Wait() too (Shutdown is
// idempotent). The destructor shuts down without a drain if Shutdown() was
// not called.
#ifndef ENGRAM_SERVICE_SHARD_SERVER_H_
#define ENGRAM_SERVICE_SHARD_SERVER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/format/shard_map.h"
#include "shard/hot_tier.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace engram {

class AdminService;
class MetricsExposer;
class ShardCollectable;
class ServingTable;
class TokenAuth;
class ShardMetrics;
class StoreService;
class StreamServer;

struct ShardServerOptions {
  // Shard directory written by `engramctl import` (shard_map.json,
  // shard.json, rocksdb/): the version served at start. Required.
  std::string db_dir;
  // Where Activate(version) finds other versions, as <versions_dir>/v<N>;
  // empty = db_dir's parent (the Helm chart's /data/v<N> layout).
  std::string versions_dir;
  // gRPC address, host:port; port 0 picks a free port (see port()). The
  // default serves every interface on the service's port, as a deployed
  // daemon does; tests pass "127.0.0.1:0".
  std::string listen = "0.0.0.0:7070";
  // Row stream port (Lookup framed on plain TCP, the clients' fast path;
  // service/stream_server.h) on the listen address's host, advertised in
  // InfoResponse.stream_port; nullopt = none (gRPC only), 0 = a free port
  // (see stream_port()).
  std::optional<int> stream_port = 0;
  // The row stream port Info advertises, when clients reach the server
  // through a port mapping (a container port, a NAT); 0 = the bound port.
  int stream_advertise_port = 0;
  // StreamServerOptions::write_timeout: a row stream client that takes no
  // response for this long is disconnected.
  absl::Duration stream_write_timeout = absl::Seconds(10);
  // Prometheus /metrics port; nullopt = no metrics endpoint, 0 = a free
  // port (see metrics_port()). It serves counters and gauges only, never rows.
  std::optional<int> metrics_port;
  // The host /metrics binds: empty = the listen address's host;
  // "127.0.0.1" keeps it to this machine (a sidecar or node agent scrapes).
  std::string metrics_host;
  // StreamServerOptions::idle_timeout.
  absl::Duration stream_idle_timeout = absl::Minutes(10);

  // TLS for gRPC and the row stream: the server's certificate chain and
  // key (PEM); both or neither. With tls_ca_file as well, clients must
  // present a certificate signed by that CA (mutual TLS).
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_ca_file;
  // Bearer tokens (service/auth.h): the data token every Lookup and Info
  // (gRPC and row stream) must carry, and the admin token of the admin
  // RPCs. Empty = none. Health and reflection (schemas, no data) stay open.
  std::string auth_token_file;
  std::string admin_token_file;
  // The shard's memory for its table: RocksDB's index of the table files
  // (fixed once open) and, with the rest, the hot tier (pinned rows, their
  // checksums and index, the admission cache). Tail reads leave nothing in
  // the page cache (direct_io), so this bounds what the table holds
  // resident. A budget below the fixed part is refused at start; one that
  // holds the whole shard pins every row (no tail reads). 0 = no budget:
  // no hot tier, every row read through RocksDB.
  uint64_t ram_budget_bytes = 0;
  // Hot-row profile that decides which rows are pinned; empty = the shard
  // directory's hot_profile.bin when it exists.
  std::string hot_profile_path;
  // The hot tier's placement, a tier_plan.json (shard/shard_format.h
  // TierPlanFile: window-aware layer shares, the cache share); empty = the
  // shard directory's tier_plan.json when it exists, for every version
  // activated (its own directory's); "none" = no tier plan for any version
  // (the frequency policy, hot_cache_share_percent). An explicit file is
  // the first version's, like hot_profile_path. A tier plan's
  // cache_share_percent replaces hot_cache_share_percent.
  std::string tier_plan_path;
  // RAM the workers' local caches hold for the whole table
  // (ClientOptions::worker_cache_bytes): this shard's share of it, the
  // hottest rows of its profile, is not pinned here (they are served from
  // the workers), so the hot tier pins the next ones. 0 = none.
  uint64_t worker_cache_bytes = 0;
  // With a hot-row profile, the share of ram_budget_bytes (percent, 0-100)
  // kept for the admission cache; the rest is pinned from the profile
  // (HotTierOptions::cache_share_percent).
  int hot_cache_share_percent = kHotTierCacheSharePercent;
  // Upper bound on the threads gRPC creates for the synchronous services
  // (reflection) via ResourceQuota / SyncServerOption. Callback handlers,
  // Lookup included, run on gRPC's own callback pool, whose size gRPC 1.51
  // does not let applications choose (it is small and fixed per machine).
  int threads = 4;
  // The scrubber's rates (HotTierOptions::scrub, shard/scrubber.h): pinned
  // rows re-checked against their checksums, and rows read back from disk
  // against shard.json's per-layer sums; bytes per second, 0 = that walk
  // off. Failures are logged and counted (engram_shard_scrub_*).
  uint64_t scrub_pinned_bytes_per_second = uint64_t{16} << 20;
  uint64_t scrub_disk_bytes_per_second = uint64_t{1} << 20;
  // Read a block tail's SST files with O_DIRECT (RowStoreOptions::direct_io),
  // so tail reads leave no page cache behind. A cuckoo tail is read through
  // mmap only: with direct_io, a cuckoo shard whose budget does not hold it
  // whole is refused at start. false = reads through the page cache, which
  // ram_budget_bytes does not bound.
  bool direct_io = true;
  // With direct_io: read each MultiGet's blocks through io_uring, all at
  // once, where the process may set up a ring (RowStoreOptions::uring_reads).
  bool uring_reads = true;
  // Threads issuing RocksDB MultiGets for hot-tier misses.
  int reader_threads = 32;
  // Reads of later need-bys in flight, at most, while a read of the
  // earliest need-by is waiting or in flight (RowStoreOptions::
  // later_read_depth, shard/read_queue.h).
  int later_read_depth = 4;
  // Helper threads that copy shares of a large request's hot rows while the
  // gRPC thread copies its own share (requests of 4,096 rows or more;
  // service/gather_pool.h). 0 = the gRPC thread copies every row itself;
  // nullopt = one helper on machines with 2 cores or more, none on one core
  // (docs/benchmarks.md, "Settings chosen by measurement").
  std::optional<int> gather_threads;
  // Lookups with more row ids fail with RESOURCE_EXHAUSTED.
  uint32_t max_rows_per_request = 65536;
  // Lookups in flight at once (gRPC and row stream together); more are
  // answered RESOURCE_EXHAUSTED at once (load shedding). 0 = no limit.
  int max_inflight_requests = 4096;
  // Lookups in flight on one row stream connection before the server stops
  // reading its next request (StreamServerOptions::max_inflight_per_connection).
  int max_inflight_per_connection = 256;
  // How long the daemon's Shutdown() on SIGTERM/SIGINT lets in-flight calls
  // finish (the argument it passes to ShardServer::Shutdown).
  absl::Duration drain_timeout = absl::Seconds(10);

  // InvalidArgument naming the first bad field (Start() checks it too).
  absl::Status Validate() const;
};

// What ShardServer::Activate did.
struct ActivateResult {
  uint64_t previous_version = 0;
  uint64_t version = 0;
  double load_seconds = 0;   // opening the new version, building its hot tier
  double drain_seconds = 0;  // waiting for the old version's requests in flight
};

class ShardServer {
 public:
  // Errors: InvalidArgument for bad options; the RowStore's error (prefixed
  // with the directory) for missing or mismatched data; Unavailable when an
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<ShardServer>> Start(const ShardServerOptions& options);
  ~ShardServer();
  ShardServer(const ShardServer&) = delete;
  ShardServer& operator=(const ShardServer&) = delete;

  // The bound gRPC port.
  int port() const { return port_; }
  // The bound row stream port, or -1 when the stream is off.
  int stream_port() const;
  // The bound metrics port, or -1 when metrics are off.
  int metrics_port() const;
  // The host part of options.listen, as given ("127.0.0.1", "[::]").
  const std::string& listen_host() const { return listen_host_; }

  // What is served now (a switch of version changes them).
  ShardMap shard_map() const;
  uint32_t shard_index() const;
  uint64_t version() const;
  // How tail rows are read (RowStore::tail_access), for the start-up log.
  std::string tail_access() const;
  // Bytes the hot tier holds now (pinned + cached).
  uint64_t hot_bytes() const;
  // The hot tier's budget: options.ram_budget_bytes less the store's fixed
  // bytes as measured when the version served was opened (0 = unbounded).
  uint64_t hot_tier_budget() const;

  // Switches to table version `version`, imported beside the served one
  // into <versions_dir>/v<version>, while serving (the EngramAdmin/Activate
  // RPC). The new version is opened and its hot tier built first (the RAM
  // of both hot tiers is held meanwhile); then new requests are served from
  // it, in-flight ones finish on the old one, whose files are closed once
  // they have (or at shutdown, if some last over a minute). Errors, with
  // the old version still served: NotFound (no such import),
  // FailedPrecondition (another table, sharding or layer geometry, or a
  // directory holding another version), the store's errors. Activating the
  // version served is a no-op. One switch at a time; thread-safe.
  absl::StatusOr<ActivateResult> Activate(uint64_t version);

  // Drains and stops the server within `drain_deadline`: health turns
  // NOT_SERVING; the server keeps serving until no call has been in flight
  // for 50 ms (at most half the deadline), so that responses reach their
  // clients before connections close; then it stops accepting calls, lets
  // in-flight calls (and their disk reads) finish, and cancels what is left
  // at the deadline. Blocks until done. Idempotent.
  void Shutdown(absl::Duration drain_deadline);
  // Blocks until Shutdown() has completed (on any thread).
  void Wait();

 private:
  ShardServer();
  // Opens the shard directory `dir` and builds its hot tier; `initial`:
  // the version served at start (options.hot_profile_path applies to it).
  static absl::StatusOr<std::shared_ptr<ServingTable>> OpenTable(const ShardServerOptions& options,
                                                                 const std::string& dir,
                                                                 bool initial);
  // The steps of Start(), in order.
  void StartMetrics(const ServingTable& table);
  // The table version and layer encodings of `table` into the metrics.
  void SetTableMetrics(const ServingTable& table);
  absl::Status StartGrpc(const ShardServerOptions& options);

  // Destroyed bottom-up: the gRPC server and the exposer before what they
  // use.
  ShardServerOptions options_;
  std::string versions_dir_;
  std::unique_ptr<TokenAuth> auth_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<ShardMetrics> metrics_;
  std::shared_ptr<ShardCollectable> scrape_metrics_;  // reads service_ at each scrape
  std::unique_ptr<StoreService> service_;             // holds the served ServingTable
  std::unique_ptr<AdminService> admin_;
  std::unique_ptr<StreamServer> stream_;
  std::unique_ptr<MetricsExposer> exposer_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string listen_host_;

  absl::Mutex activate_mutex_;
  // Versions switched away from whose requests outlived Activate's wait.
  std::vector<std::shared_ptr<ServingTable>> retired_ ABSL_GUARDED_BY(activate_mutex_);

  absl::Mutex shutdown_mutex_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mutex_) = false;
};

}  // namespace engram

#endif  // ENGRAM_SERVICE_SHARD_SERVER_H_

#include "service/shard_server.h"

#include <malloc.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/net/prometheus_exposer.h"
#include "common/net/tls.h"
#include "common/util/log.h"
#include "common/util/status_macros.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "prometheus/registry.h"
#include "service/admin_service.h"
#include "service/auth.h"
#include "service/serving_table.h"
#include "service/shard_collectable.h"
#include "service/shard_metrics.h"
#include "service/store_service.h"
#include "service/stream_server.h"
#include "shard/footprint.h"
#include "shard/hot_tier.h"
#include "shard/row_store.h"
#include "shard/shard_format.h"

namespace engram {
namespace {

// This process's resident anonymous and file-backed bytes (RssAnon,
// RssFile of /proc/self/status); zeros where it cannot be read.
void ReadProcessResident(uint64_t* anon, uint64_t* file) {
  *anon = *file = 0;
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    uint64_t kb = 0;
    if (std::sscanf(line.c_str(), "RssAnon: %" SCNu64, &kb) == 1) *anon = kb << 10;
    if (std::sscanf(line.c_str(), "RssFile: %" SCNu64, &kb) == 1) *file = kb << 10;
  }
}

absl::Status Annotate(const absl::Status& status, const std::string& prefix) {
  return absl::Status(status.code(), absl::StrCat(prefix, std::string(status.message())));
}

// A port option that may be -1 (off), 0 (any free port) or a port.
absl::Status CheckPortOption(const char* what, std::optional<int> port) {
  if (!port.has_value() || (*port >= 0 && *port <= 65535)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", *port, " is not 0 (any) or a port up to 65535"));
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

absl::Status ShardServerOptions::Validate() const {
  const ShardServerOptions& options = *this;
  if (options.db_dir.empty()) {
    return absl::InvalidArgumentError(
        "no shard directory given (ShardServerOptions::db_dir / --db)");
  }
  if (options.listen.rfind(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address \"", options.listen, "\" is not host:port"));
  }
  RETURN_IF_ERROR(CheckPortOption("metrics port", options.metrics_port));
  if (options.threads < 1 || options.threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("threads = ", options.threads, " is not in 1..1024"));
  }
  if (options.reader_threads < 1 || options.reader_threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("reader threads = ", options.reader_threads, " is not in 1..1024"));
  }
  if (options.later_read_depth < 1 || options.later_read_depth > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("later read depth = ", options.later_read_depth, " is not in 1..1024"));
  }
  if (options.gather_threads.has_value() &&
      (*options.gather_threads < 0 || *options.gather_threads > 64)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gather threads = ", *options.gather_threads, " is not in 0..64"));
  }
  if (options.hot_cache_share_percent < 0 || options.hot_cache_share_percent > 100) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hot tier cache share ", options.hot_cache_share_percent, "% is not in 0..100"));
  }
  RETURN_IF_ERROR(CheckPortOption("row stream port", options.stream_port));
  if (options.stream_advertise_port < 0 || options.stream_advertise_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("advertised row stream port ", options.stream_advertise_port,
                     " is not 0 (the bound port) or a port up to 65535"));
  }
  if (options.max_rows_per_request < 1 || options.max_rows_per_request > (1u << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max rows per request = ", options.max_rows_per_request, " is not in 1..16777216"));
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs both a certificate and its key (--tls-cert and --tls-key)");
  }
  if (!options.tls_ca_file.empty() && options.tls_cert_file.empty()) {
    return absl::InvalidArgumentError(
        "a client CA (--tls-ca) needs the server's own certificate (--tls-cert, --tls-key)");
  }
  if (options.max_inflight_requests < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max in-flight requests = ", options.max_inflight_requests, " is negative (0 = no limit)"));
  }
  if (options.max_inflight_per_connection < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max in-flight requests per connection = ", options.max_inflight_per_connection,
        " is below 1"));
  }
  if (options.stream_idle_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the row stream's idle timeout must be positive");
  }
  if (options.drain_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "drain timeout ", absl::FormatDuration(options.drain_timeout), " is negative"));
  }
  return absl::OkStatus();
}

namespace {

// How long no call may have been in flight before a draining server stops
// accepting calls; see Shutdown().
constexpr absl::Duration kQuietPeriod = absl::Milliseconds(50);

// How long Activate waits for the old version's requests in flight.
constexpr absl::Duration kRetireWait = absl::Seconds(60);

// The directory that holds `dir` ("." for a bare name).
std::string ParentDir(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const size_t slash = d.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : d.substr(0, slash);
}

// The host of "host:port" ("[::1]:80" -> "[::1]").
std::string HostOf(const std::string& listen) { return listen.substr(0, listen.rfind(':')); }

// civetweb takes numeric addresses only.
std::string MetricsBindAddress(const std::string& host, int port) {
  std::string numeric = host;
  if (host.empty() || host == "*") numeric = "0.0.0.0";
  if (host == "localhost") numeric = "127.0.0.1";
  return absl::StrCat(numeric, ":", port);
}

// ShardServerOptions::gather_threads, with nullopt (auto) resolved.
int GatherThreads(std::optional<int> option) {
  if (option.has_value()) return *option;
  return std::thread::hardware_concurrency() >= 2 ? 1 : 0;
}

// The row stream binds what getaddrinfo takes: no brackets, no wildcard
// spelling of gRPC's.
std::string StreamBindHost(const std::string& host) {
  if (host.empty() || host == "*") return "0.0.0.0";
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

// The reflection plugin and the default health service are process-wide
// gRPC settings, applied before any ServerBuilder exists.
void InitGrpcPlugins() {
  static std::once_flag once;
  std::call_once(once, [] {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  });
}

}  // namespace

ShardServer::ShardServer() = default;

absl::StatusOr<std::unique_ptr<ShardServer>> ShardServer::Start(const ShardServerOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<ShardServer> server(new ShardServer());
  server->listen_host_ = HostOf(options.listen);
  // Credentials first: a bad file fails the start before the data loads.
  ASSIGN_OR_RETURN(TokenAuth auth,
                   TokenAuth::FromFiles(options.auth_token_file, options.admin_token_file));
  server->auth_ = std::make_unique<TokenAuth>(std::move(auth));
  std::shared_ptr<TlsContext> stream_tls;
  if (!options.tls_cert_file.empty()) {
    ASSIGN_OR_RETURN(stream_tls, TlsContext::Server({options.tls_cert_file, options.tls_key_file,
                                                     options.tls_ca_file}));
  }
  server->options_ = options;
  server->versions_dir_ =
      options.versions_dir.empty() ? ParentDir(options.db_dir) : options.versions_dir;
  ASSIGN_OR_RETURN(std::shared_ptr<ServingTable> table,
                   OpenTable(options, options.db_dir, /*initial=*/true));
  server->StartMetrics(*table);
  if (options.metrics_port.has_value()) {
    auto exposer = MetricsExposer::Start(MetricsBindAddress(
        options.metrics_host.empty() ? server->listen_host_ : options.metrics_host,
        *options.metrics_port));
    if (!exposer.ok()) {
      return Annotate(exposer.status(), "starting the metrics endpoint: ");
    }
    server->exposer_ = std::move(*exposer);
    server->exposer_->exposer().RegisterCollectable(server->registry_);
  }
  StoreServiceLimits limits;
  limits.max_rows_per_request = options.max_rows_per_request;
  limits.max_inflight_requests = options.max_inflight_requests;
  limits.gather_threads = GatherThreads(options.gather_threads);
  server->service_ = std::make_unique<StoreService>(std::move(table), *server->metrics_, limits,
                                                    server->auth_.get());
  if (server->exposer_ != nullptr) {
    // Its values are read from service_: registered once that exists (the
    // exposer's lock orders the two).
    server->exposer_->exposer().RegisterCollectable(server->scrape_metrics_);
  }
  server->admin_ = std::make_unique<AdminService>(server.get(), server->auth_.get());
  if (options.stream_port.has_value()) {
    StreamServerOptions stream_options;
    stream_options.host = StreamBindHost(server->listen_host_);
    stream_options.port = *options.stream_port;
    stream_options.write_timeout = options.stream_write_timeout;
    stream_options.idle_timeout = options.stream_idle_timeout;
    stream_options.max_inflight_per_connection = options.max_inflight_per_connection;
    stream_options.tls = stream_tls;
    stream_options.auth = server->auth_.get();
    // As gRPC's limit below: max_rows_per_request ids of up to 10 bytes.
    stream_options.max_request_bytes =
        size_t{options.max_rows_per_request} * 11 + (size_t{1} << 16);
    ASSIGN_OR_RETURN(auto stream, StreamServer::Start(stream_options, server->service_.get(),
                                                      server->metrics_.get()));
    server->stream_ = std::move(stream);
    server->service_->set_stream_port(options.stream_advertise_port > 0
                                          ? options.stream_advertise_port
                                          : server->stream_->port());
  }
  RETURN_IF_ERROR(server->StartGrpc(options));
  return server;
}

namespace {

// The hot tier's share of ShardServerOptions::ram_budget_bytes: what is
// left after the store's fixed bytes. A budget below those, or one that
// leaves a cuckoo tail (page-cache reads) to be read under direct_io, is
// refused with one line saying what to do.
absl::StatusOr<uint64_t> TierBudget(const ShardServerOptions& options, const std::string& dir,
                                    const RowStore& store, bool cuckoo) {
  const uint64_t budget = options.ram_budget_bytes;
  if (budget == 0) return 0;
  const ShardFootprint footprint = FootprintOf(store);
  const uint64_t fixed = footprint.fixed_bytes;
  if (budget < fixed) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--ram-budget ", budget, " is below shard directory ", dir, "'s fixed overhead of ", fixed,
        " bytes (RocksDB's index of its table files): raise it to at least ", fixed));
  }
  const uint64_t tier = budget - fixed;
  const uint64_t whole = footprint.whole_shard_budget();
  if (cuckoo && options.direct_io && !footprint.HoldsWholeShard(budget)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard directory ", dir, " holds a cuckoo tail, which is read through the page cache, ",
        "outside --ram-budget ", budget, ": raise --ram-budget to at least ", whole,
        " to hold the whole shard, re-import it with --tail-format block (read with O_DIRECT), ",
        "or pass --direct-io=false to let the page cache hold the tail"));
  }
  return tier;
}

// The tier plan of the version in `dir` (ShardServerOptions::
// tier_plan_path) into *tier; a bad one is an error naming the file, what
// is wrong and how to fix it.
absl::Status ApplyTierPlan(const ShardServerOptions& options, const std::string& dir, bool initial,
                           const ShardMap& map, HotTierOptions* tier) {
  if (options.tier_plan_path == "none") return absl::OkStatus();
  std::string path = initial ? options.tier_plan_path : "";
  if (path.empty()) {
    path = absl::StrCat(dir, "/", kTierPlanFile);
    if (!FileExists(path)) return absl::OkStatus();
  }
  const std::string fix =
      "; fix it (engramctl plan --write-tier-plan writes one), remove it, or start with "
      "--tier-plan=none";
  absl::StatusOr<TierPlanFile> plan = TierPlanFile::Load(path);
  if (!plan.ok())
    return absl::Status(plan.status().code(), absl::StrCat(plan.status().message(), fix));
  HotTierOptions placed = *tier;
  if (plan->cache_share_percent.has_value()) {
    placed.cache_share_percent = *plan->cache_share_percent;
  }
  placed.layer_pin_shares = plan->layer_pin_shares();
  if (!placed.layer_pin_shares.empty() && placed.layer_pin_shares.size() != map.layer_rows.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tier plan ", path, ": \"layer_pin_percent\" has ", placed.layer_pin_shares.size(),
        " entries; the table has ", map.layer_rows.size(), " Engram layers (one each)", fix));
  }
  if (absl::Status s = placed.Validate(map.layer_rows.size()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("tier plan ", path, ": ", s.message(), fix));
  }
  if (plan->ram_budget_bytes != 0 && plan->ram_budget_bytes != options.ram_budget_bytes) {
    LogLine('W', absl::StrCat("engram-shard: tier plan ", path, " was chosen for --ram-budget ",
                              plan->ram_budget_bytes, ", this shard has ", options.ram_budget_bytes,
                              "; it is applied as is"));
  }
  LogLine('I', absl::StrCat("engram-shard: tier plan ", path, ": policy ",
                            plan->policy == TierPlanFile::Policy::kWindow ? "window" : "frequency",
                            ", cache share ", placed.cache_share_percent, "%",
                            placed.layer_pin_shares.empty()
                                ? ""
                                : absl::StrCat(", layers pinned ",
                                               absl::StrJoin(plan->layer_pin_percent, "%/"), "%")));
  *tier = std::move(placed);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<ServingTable>> ShardServer::OpenTable(
    const ShardServerOptions& options, const std::string& dir, bool initial) {
  // A cuckoo tail can only be read through mmap; RowStore::Open reports
  // an unreadable shard.json itself.
  absl::StatusOr<ShardInfo> info = ShardInfo::Load(absl::StrCat(dir, "/", kShardInfoFile));
  const bool cuckoo = info.ok() && info->tail_format == TailFormat::kCuckoo;
  RowStoreOptions store_options;
  store_options.direct_io = options.direct_io && !cuckoo;
  store_options.uring_reads = options.uring_reads;
  store_options.reader_threads = options.reader_threads;
  store_options.later_read_depth = options.later_read_depth;
  auto store = RowStore::Open(dir, store_options);
  if (!store.ok()) {
    // Most of RowStore's errors name the directory already.
    if (absl::StrContains(store.status().message(), dir)) return store.status();
    return Annotate(store.status(), absl::StrCat("shard directory ", dir, ": "));
  }
  ASSIGN_OR_RETURN(const uint64_t tier_budget, TierBudget(options, dir, **store, cuckoo));
  HotTierOptions tier_options;
  tier_options.budget_bytes = tier_budget;
  // An explicit profile is the first version's; others use their own.
  if (initial) tier_options.profile_path = options.hot_profile_path;
  tier_options.scrub.pinned_bytes_per_second = options.scrub_pinned_bytes_per_second;
  tier_options.scrub.disk_bytes_per_second = options.scrub_disk_bytes_per_second;
  tier_options.scrub.report = [](const std::string& line) { LogLine('E', line); };
  tier_options.cache_share_percent = static_cast<uint32_t>(options.hot_cache_share_percent);
  // Rows are spread evenly over the shards (row % n_shards), so this
  // shard's share of the workers' cache is its profile's head.
  tier_options.worker_cache_bytes =
      options.worker_cache_bytes / std::max<uint32_t>(1, (*store)->shard_map().n_shards);
  if (tier_options.profile_path.empty()) {
    const std::string profile = absl::StrCat(dir, "/", kHotProfileFile);
    if (FileExists(profile)) tier_options.profile_path = profile;
  }
  RETURN_IF_ERROR(ApplyTierPlan(options, dir, initial, (*store)->shard_map(), &tier_options));
  auto tier = HotTier::Build(**store, tier_options);
  if (!tier.ok()) return Annotate(tier.status(), "building the hot tier: ");
  return std::make_shared<ServingTable>(dir, std::move(*store), std::move(*tier));
}

void ShardServer::SetTableMetrics(const ServingTable& table) {
  std::vector<std::string> encodings;
  for (const ShardInfo::Layer& l : table.store().shard_info().layers) {
    encodings.emplace_back(RowEncodingName(l.encoding));
  }
  scrape_metrics_->SetTable(table.version(), encodings, table.map().row_bytes);
}

void ShardServer::StartMetrics(const ServingTable& table) {
  registry_ = std::make_shared<prometheus::Registry>();
  metrics_ =
      std::make_unique<ShardMetrics>(*registry_, static_cast<int>(table.map().layer_rows.size()));
  scrape_metrics_ = std::make_shared<ShardCollectable>(options_.ram_budget_bytes, [this] {
    const std::shared_ptr<ServingTable> t = service_->table();
    ShardCollectable::Snapshot now;
    now.hot_pinned_bytes = t->tier().pinned_bytes();
    now.hot_cached_bytes = t->tier().cached_bytes();
    now.stats = t->store().Stats();
    ShardCollectable::Resident& resident = now.resident;
    resident.pinned_rows = t->tier().pinned_bytes();
    resident.cached_rows = t->tier().cached_bytes();
    resident.hot_index = t->tier().index_bytes();
    resident.rocksdb_index = StoreFixedBytes(now.stats);
    ReadProcessResident(&resident.process_anon, &resident.process_file);
    for (auto& stat : t->tier().Stats()) now.stats.push_back(std::move(stat));  // scrub counts
    return now;
  });
  SetTableMetrics(table);
}

absl::Status ShardServer::StartGrpc(const ShardServerOptions& options) {
  InitGrpcPlugins();
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!options.tls_cert_file.empty()) {
    grpc::SslServerCredentialsOptions ssl;
    ASSIGN_OR_RETURN(std::string cert, ReadPemFile(options.tls_cert_file, "TLS certificate"));
    ASSIGN_OR_RETURN(std::string key, ReadPemFile(options.tls_key_file, "TLS key"));
    ssl.pem_key_cert_pairs.push_back({key, cert});
    if (!options.tls_ca_file.empty()) {
      ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPemFile(options.tls_ca_file, "TLS client CA"));
      ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    credentials = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, credentials, &port_);
  builder.RegisterService(service_.get());
  builder.RegisterService(admin_.get());
  // Clients ping every 2 s, with or without calls, to find dead links
  // (client/shard_channels.cc): allow it.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // A second server on the same port is an error, not a silent load split.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Room for max_rows_per_request ids of up to 10 varint bytes each.
  const size_t max_request = size_t{options.max_rows_per_request} * 11 + (size_t{1} << 16);
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::max<size_t>(max_request, 4 << 20)));
  // Bounds the threads of the synchronous services (reflection); see
  // ShardServerOptions::threads.
  grpc::ResourceQuota quota("engram-shard");
  quota.SetMaxThreads(options.threads + 1);  // +1: gRPC counts its own poller
  builder.SetResourceQuota(quota);
  using SyncOption = grpc::ServerBuilder::SyncServerOption;
  builder.SetSyncServerOption(SyncOption::NUM_CQS, 1);
  builder.SetSyncServerOption(SyncOption::MIN_POLLERS, 1);
  builder.SetSyncServerOption(SyncOption::MAX_POLLERS, options.threads);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    server_.reset();
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen,
                                               " (address in use or not valid for this host?)"));
  }
  server_->GetHealthCheckService()->SetServingStatus(v1::EngramStore::service_full_name(), true);
  return absl::OkStatus();
}

ShardServer::~ShardServer() {
  if (server_ != nullptr) {
    Shutdown(absl::ZeroDuration());
    server_->Wait();
  }
  exposer_.reset();  // no scrape reads service_ after this
}

int ShardServer::stream_port() const { return stream_ == nullptr ? -1 : stream_->port(); }

int ShardServer::metrics_port() const { return exposer_ == nullptr ? -1 : exposer_->port(); }

ShardMap ShardServer::shard_map() const { return service_->table()->map(); }
uint32_t ShardServer::shard_index() const { return service_->table()->shard_index(); }
uint64_t ShardServer::version() const { return service_->table()->version(); }
std::string ShardServer::tail_access() const { return service_->table()->store().tail_access(); }
uint64_t ShardServer::hot_bytes() const {
  const std::shared_ptr<ServingTable> t = service_->table();
  return t->tier().pinned_bytes() + t->tier().cached_bytes();
}

uint64_t ShardServer::hot_tier_budget() const { return service_->table()->tier().budget_bytes(); }

absl::StatusOr<ActivateResult> ShardServer::Activate(uint64_t version) {
  absl::MutexLock lock(&activate_mutex_);
  std::shared_ptr<ServingTable> current = service_->table();
  ActivateResult result;
  result.previous_version = current->version();
  result.version = version;
  if (version == current->version()) return result;
  const std::string dir = absl::StrCat(versions_dir_, "/v", version);
  if (!FileExists(absl::StrCat(dir, "/", kShardInfoFile))) {
    return absl::NotFoundError(absl::StrCat("no version ", version, " to activate: ", dir,
                                            " holds no imported shard (engramctl import --out ",
                                            dir, ")"));
  }
  const absl::Time start = absl::Now();
  // Opened on a thread of its own rather than on the gRPC thread that runs
  // Activate: the version's long-lived blocks (RocksDB's table readers,
  // the hot tier's index) then come from a malloc arena no request's
  // short-lived buffers share, and anonymous memory holds one level from
  // switch to switch (docs/reliability.md, "Soak").
  absl::StatusOr<std::shared_ptr<ServingTable>> opened;
  std::thread loader([&] { opened = OpenTable(options_, dir, false); });
  loader.join();
  ASSIGN_OR_RETURN(std::shared_ptr<ServingTable> next, std::move(opened));
  const ShardMap& a = current->map();
  const ShardMap& b = next->map();
  if (b.table != a.table || b.n_shards != a.n_shards ||
      next->shard_index() != current->shard_index() || b.layer_rows != a.layer_rows ||
      b.row_bytes != a.row_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " holds shard ", next->shard_index(), "/", b.n_shards, " of table \"", b.table,
        "\"; this server serves shard ", current->shard_index(), "/", a.n_shards, " of \"", a.table,
        "\" (a new version must keep the table, the sharding and the layer sizes)"));
  }
  if (b.version != version) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " holds version ", b.version, " of table \"", b.table, "\", not ", version));
  }
  const absl::Time loaded = absl::Now();
  current.reset();  // the wait below counts the references of requests alone
  SetTableMetrics(*next);
  std::shared_ptr<ServingTable> old = service_->SwapTable(std::move(next));
  LogLine('I', absl::StrCat("engram-shard: serving version ", version, " of table \"", b.table,
                            "\" from ", dir, " (was ", result.previous_version, ")"));
  // Requests in flight hold the old version; it is destroyed here, on this
  // thread, once they are done (never on a reader thread of its own store).
  const absl::Time give_up = absl::Now() + kRetireWait;
  while (old.use_count() > 1 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(2));
  if (old.use_count() > 1) {
    LogLine('W', absl::StrCat("engram-shard: version ", result.previous_version,
                              " still has requests in flight after ",
                              absl::FormatDuration(kRetireWait), "; it is closed at shutdown"));
    retired_.push_back(std::move(old));
  }
  old.reset();
#if defined(__GLIBC__)
  // The old version is freed now: glibc's bytes in use are back where they
  // were before the switch (docs/reliability.md, "Soak"). Its small blocks
  // (the admission cache's bookkeeping, RocksDB's table readers) lie
  // between live ones, which keeps glibc from giving their pages back: do
  // it, in every arena. malloc_trim does not shrink the top of an arena
  // other than the main one; engram-shard fixes glibc's mmap threshold so
  // that free() does (service/engram_shard_main.cc).
  ::malloc_trim(0);
#endif
  result.load_seconds = absl::ToDoubleSeconds(loaded - start);
  result.drain_seconds = absl::ToDoubleSeconds(absl::Now() - loaded);
  return result;
}

void ShardServer::Shutdown(absl::Duration drain_deadline) {
  absl::MutexLock lock(&shutdown_mutex_);
  if (shut_down_) return;
  shut_down_ = true;
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + drain_deadline;
  // Health goes NOT_SERVING first, so balancers and clients that watch it
  // stop sending.
  server_->GetHealthCheckService()->SetServingStatus(false);
  // Lame duck: keep serving, new calls included, until no call has been in
  // a handler for kQuietPeriod (for at most half the drain deadline). gRPC
  // closes a connection as soon as its last stream is written after
  // Shutdown, and a client still reading a large response then gets a
  // reset that loses the response's tail; an idle connection closes safely.
  const absl::Time lame_duck_end = start + drain_deadline / 2;
  absl::Time last_busy = absl::Now();
  while (true) {
    const absl::Time now = absl::Now();
    if (metrics_->inflight().Value() > 0) last_busy = now;
    if (now - last_busy >= kQuietPeriod || now >= lame_duck_end) break;
    absl::SleepFor(absl::Milliseconds(1));
  }
  // The row stream closes its connections once their in-flight Lookups
  // have answered; clients fail over on the closed connection. Then gRPC
  // stops accepting calls, waits for in-flight ones (their disk reads
  // finish them from the reader threads) and cancels what is left at the
  // deadline.
  if (stream_ != nullptr) stream_->Shutdown();
  server_->Shutdown(absl::ToChronoTime(deadline));
}

void ShardServer::Wait() { server_->Wait(); }

}  // namespace engram

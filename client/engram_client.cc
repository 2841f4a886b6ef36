// EngramClient (client/engram_client.h): Create, the public accessors, and
// Prefetch, which validates a step, hashes it and hands the ids to a
// StepEngine (client/step_engine.h), where the step's life happens.
#include "client/engram_client.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/engram_client_impl.h"
#include "client/local_cache.h"
#include "client/step_engine.h"
#include "common/codec/row_encoding.h"
#include "common/format/shard_map.h"
#include "common/format/table.h"
#include "common/net/shard_addresses.h"
#include "common/net/tls.h"
#include "common/util/status_macros.h"

namespace engram {

namespace {

// The public value types (client/engram_types.h) mirror common/'s.
static_assert(kDefaultSequenceCapacity == SequenceState::kDefaultCapacity);
static_assert(static_cast<int>(StoredEncoding::kFp8) == static_cast<int>(RowEncoding::kFp8) &&
              static_cast<int>(StoredEncoding::kQ8_0) == static_cast<int>(RowEncoding::kQ8_0) &&
              static_cast<int>(StoredEncoding::kQ2_K) == static_cast<int>(RowEncoding::kQ2_K) &&
              static_cast<int>(StoredEncoding::kQ3_K) == static_cast<int>(RowEncoding::kQ3_K) &&
              static_cast<int>(StoredEncoding::kQ4_K) == static_cast<int>(RowEncoding::kQ4_K) &&
              static_cast<int>(StoredEncoding::kQ5_K) == static_cast<int>(RowEncoding::kQ5_K) &&
              static_cast<int>(StoredEncoding::kQ6_K) == static_cast<int>(RowEncoding::kQ6_K) &&
              static_cast<int>(StoredEncoding::kMxfp4) == static_cast<int>(RowEncoding::kMxfp4) &&
              static_cast<int>(StoredEncoding::kBf16) == static_cast<int>(RowEncoding::kBf16) &&
              static_cast<int>(StoredEncoding::kF16) == static_cast<int>(RowEncoding::kF16) &&
              static_cast<int>(StoredEncoding::kF32) == static_cast<int>(RowEncoding::kF32));

TableLayout PublicLayout(const HashLayout& l) {
  TableLayout t;
  t.vocab_size = l.vocab_size;
  t.engram_layer_ids = l.engram_layer_ids;
  t.max_ngram_size = l.max_ngram_size;
  t.n_heads = l.n_heads;
  t.table_rows = l.table_rows;
  t.json = l.ToJson();
  return t;
}

absl::StatusOr<ShardMap> ShardMapFor(const TableManifest& manifest, const ClientOptions& options) {
  if (!options.shard_map_path.empty()) return ShardMap::Load(options.shard_map_path);
  if (options.shard_addresses.empty()) {
    return absl::InvalidArgumentError("give the client a shard map or one address list per shard");
  }
  ShardMap map;
  map.table = manifest.table;
  map.version = manifest.version;
  map.n_shards = static_cast<uint32_t>(options.shard_addresses.size());
  for (const LayerInfo& l : manifest.layers) {
    map.layer_rows.push_back(l.rows);
    map.row_bytes.push_back(static_cast<uint32_t>(l.row_bytes));
  }
  RETURN_IF_ERROR(map.Validate());
  return map;
}

}  // namespace

const char* StoredEncodingName(StoredEncoding e) {
  return RowEncodingName(static_cast<RowEncoding>(e));
}

Sequence::Sequence(int64_t capacity) : rep_(std::make_unique<Rep>(capacity)) {}
Sequence::~Sequence() = default;
Sequence::Sequence(Sequence&&) noexcept = default;
Sequence& Sequence::operator=(Sequence&&) noexcept = default;
int64_t Sequence::length() const { return rep_->state.length(); }
void Sequence::Reset() { rep_->state.Reset(); }

absl::Status ClientOptions::Validate() const {
  if (table_dir.empty()) {
    return absl::InvalidArgumentError("no table directory given (ClientOptions::table_dir)");
  }
  if (tls_cert_file.empty() != tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate needs both tls_cert_file and tls_key_file");
  }
  if (!tls_cert_file.empty() && tls_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate (tls_cert_file) needs tls_ca_file, the CA of the shards' "
        "certificates");
  }
  for (size_t s = 0; s < shard_addresses.size(); ++s) {
    if (shard_addresses[s].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("shard ", s, " has no address"));
    }
  }
  if (step_deadline <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("step_deadline is ", absl::FormatDuration(step_deadline),
                     "; it must be positive (InfiniteDuration() for none)"));
  }
  if (rpc_deadline <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rpc_deadline is ", absl::FormatDuration(rpc_deadline), "; it must be positive"));
  }
  if (max_rows_per_rpc == 0) {
    return absl::InvalidArgumentError("max_rows_per_rpc must be positive");
  }
  if (channels_per_replica < 1 || channels_per_replica > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("channels_per_replica = ", channels_per_replica, " is not in 1..64"));
  }
  if (hedge_delay < absl::ZeroDuration() || min_hedge_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("hedge_delay and min_hedge_delay must not be negative");
  }
  if (block_time < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block_time is ", absl::FormatDuration(block_time), "; it must not be negative"));
  }
  if (max_reconnect_backoff <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("max_reconnect_backoff must be positive");
  }
  if (!http2_bdp_probe && http2_window_bytes < (64u << 10)) {
    return absl::InvalidArgumentError(
        absl::StrCat("http2_window_bytes is ", http2_window_bytes,
                     "; with http2_bdp_probe off it must be at least 65536 (HTTP/2's default)"));
  }
  if (sequence_capacity < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence_capacity = ", sequence_capacity, " is not positive"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<EngramClient>> EngramClient::Create(ClientOptions options) {
  RETURN_IF_ERROR(options.Validate());
  auto impl = std::make_unique<Impl>();
  ASSIGN_OR_RETURN(TableManifest manifest, TableManifest::Load(options.table_dir));
  ASSIGN_OR_RETURN(ShardMap map, ShardMapFor(manifest, options));
  if (map.table != manifest.table) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard map ", options.shard_map_path, " is for table '", map.table,
                     "', the manifest in ", options.table_dir, " for '", manifest.table, "'"));
  }
  if (map.version != manifest.version) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard map ", options.shard_map_path, " is of version ", map.version, " of table '",
        map.table, "', the manifest in ", options.table_dir, " of version ", manifest.version,
        ": give the table directory and shard map of the same version"));
  }
  if (map.layer_rows.size() != manifest.layers.size()) {
    return absl::FailedPreconditionError("shard map and manifest disagree on the layers");
  }
  for (size_t l = 0; l < manifest.layers.size(); ++l) {
    if (map.layer_rows[l] != manifest.layers[l].rows ||
        map.row_bytes[l] != static_cast<uint32_t>(manifest.layers[l].row_bytes)) {
      return absl::FailedPreconditionError(
          absl::StrCat("shard map and manifest disagree on layer ", l, "'s rows or row bytes"));
    }
  }
  std::vector<std::vector<std::string>> addrs =
      options.shard_addresses.empty() ? map.replicas : options.shard_addresses;
  if (addrs.size() != map.n_shards) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the table has ", map.n_shards, " shards but ", addrs.size(), " shard address lists ",
        options.shard_addresses.empty() ? "are in the shard map's replicas" : "were given", ": \"",
        FormatShardAddresses(addrs),
        "\" (one list per shard, shards separated by ',', replicas by '|')"));
  }
  for (size_t s = 0; s < addrs.size(); ++s) {
    if (addrs[s].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("shard ", s, " has no address"));
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<NgramHasher> hasher, NgramHasher::Create(manifest.layout));

  Impl& c = *impl;
  c.options = std::move(options);
  c.manifest = std::move(manifest);
  c.shard_map = std::move(map);
  c.hasher = std::move(hasher);
  c.layout = PublicLayout(c.hasher->layout());
  c.n_layers = c.hasher->n_layers();
  c.n_cols = c.hasher->n_cols();
  c.n_shards = static_cast<int>(c.shard_map.n_shards);
  ChannelOptions ch;
  ch.channels_per_replica = c.options.channels_per_replica;
  ch.max_reconnect_backoff = c.options.max_reconnect_backoff;
  ch.http2_bdp_probe = c.options.http2_bdp_probe;
  ch.http2_window_bytes = c.options.http2_window_bytes;
  ch.row_stream = c.options.transport == Transport::kRowStream;
  ch.stream_connect_timeout =
      std::clamp(c.options.rpc_deadline, absl::Milliseconds(100), absl::Seconds(2));
  ch.tls_server_name = c.options.tls_server_name;
  ch.auth_token = c.options.auth_token;
  if (!c.options.tls_ca_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPemFile(c.options.tls_ca_file, "TLS CA"));
    if (!c.options.tls_cert_file.empty()) {
      ASSIGN_OR_RETURN(ssl.pem_cert_chain,
                       ReadPemFile(c.options.tls_cert_file, "TLS client certificate"));
      ASSIGN_OR_RETURN(ssl.pem_private_key, ReadPemFile(c.options.tls_key_file, "TLS client key"));
    }
    ch.credentials = grpc::SslCredentials(ssl);
    ASSIGN_OR_RETURN(ch.stream_tls,
                     TlsContext::Client(
                         {c.options.tls_cert_file, c.options.tls_key_file, c.options.tls_ca_file}));
  }
  c.channels = std::make_unique<ShardChannels>(addrs, ch);

  StepConfig sc;
  sc.table = c.shard_map.table;
  sc.version = c.options.version != 0 ? c.options.version : c.shard_map.version;
  // Sent with every Lookup: the manifest's SourceChecksum (empty when asking
  // for a version other than the manifest's, whose rows it does not describe).
  if (sc.version == c.manifest.version) sc.source_checksum = c.manifest.source_checksum();
  sc.n_cols = c.n_cols;
  sc.n_shards = c.n_shards;
  sc.layers = c.manifest.layers;
  sc.pipeline_layers = c.options.pipeline_layers;
  sc.channels_per_replica = c.options.channels_per_replica;
  sc.max_rows_per_rpc = c.options.max_rows_per_rpc;
  sc.step_deadline = c.options.step_deadline;
  sc.rpc_deadline = c.options.rpc_deadline;
  sc.hedge = c.options.hedge;
  sc.hedge_delay = c.options.hedge_delay;
  sc.min_hedge_delay = c.options.min_hedge_delay;
  sc.block_time = c.options.block_time;
  c.steps = std::make_unique<StepPool>(std::move(sc), c.channels.get());

  auto client = std::unique_ptr<EngramClient>(new EngramClient(std::move(impl)));
  if (c.options.metrics_registry != nullptr) {
    EngramClient* self = client.get();
    ASSIGN_OR_RETURN(c.metrics, ClientMetrics::Create(c.options.metrics_registry, c.n_shards,
                                                      [self] { return self->stats(); }));
  }
  if (c.options.worker_cache_bytes > 0) {
    ASSIGN_OR_RETURN(c.local_cache,
                     LocalCache::Build(c.options.worker_cache_profiles,
                                       c.options.worker_cache_bytes, c.shard_map, *c.steps));
    c.steps->SetLocalCache(c.local_cache.get());
  }
  return client;
}

EngramClient::EngramClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EngramClient::~EngramClient() {
  // First: its last refresh reads stats() from a whole Impl.
  if (impl_ != nullptr) impl_->metrics.reset();
}

const TableLayout& EngramClient::layout() const { return impl_->layout; }
int EngramClient::n_layers() const { return impl_->n_layers; }
int EngramClient::n_cols() const { return impl_->n_cols; }
int EngramClient::n_shards() const { return impl_->n_shards; }
int EngramClient::row_bytes(int layer) const { return impl_->manifest.layers[layer].row_bytes; }
int EngramClient::head_dim(int layer) const { return impl_->manifest.layers[layer].head_dim; }
StoredEncoding EngramClient::encoding(int layer) const {
  return static_cast<StoredEncoding>(impl_->manifest.layers[layer].encoding);
}
size_t EngramClient::OutputRowBytes(int layer, RowFormat format) const {
  return FormatRowBytes(impl_->manifest.layers[layer], format);
}

std::unique_ptr<Sequence> EngramClient::NewSequence() const {
  return std::make_unique<Sequence>(impl_->options.sequence_capacity);
}

absl::Duration EngramClient::RecentP95() const { return impl_->steps->latency().P95(); }

ClientStats EngramClient::stats() const {
  StepCounters& c = impl_->steps->counters();
  const RpcCounters& r = impl_->steps->rpc_counters();
  ClientStats s;
  s.steps = c.steps.load();
  s.ids = c.ids.load();
  s.unique_rows = c.unique_rows.load();
  s.local_hits = c.local_hits.load();
  s.rows_fetched = c.rows_fetched.load();
  s.bytes_received = r.bytes_received.load();
  s.bytes_sent = r.bytes_sent.load();
  s.rpcs = r.rpcs.load();
  s.retries = r.retries.load();
  s.stream_answers = r.stream_answers.load();
  s.hedges = r.hedges.load();
  s.failed_rpcs = r.failed.load();
  absl::MutexLock l(&c.mu);
  s.shard_latency_sum_seconds = c.shard_latency_sum;
  s.shard_rpcs = c.shard_rpcs;
  return s;
}

uint64_t EngramClient::worker_cache_bytes() const {
  return impl_->local_cache == nullptr ? 0 : impl_->local_cache->bytes();
}

absl::StatusOr<Step> EngramClient::Prefetch(const StepInput& in) {
  const absl::Time began = absl::Now();
  Impl& c = *impl_;
  const int64_t B = static_cast<int64_t>(in.sequences.size());
  const int64_t T = in.tokens_per_sequence;
  if (B == 0 || T <= 0) {
    return absl::InvalidArgumentError("a step needs at least one sequence and one token");
  }
  if (in.start_positions.size() != in.sequences.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "start_positions has ", in.start_positions.size(), " entries for ", B, " sequences"));
  }
  if (static_cast<int64_t>(in.token_ids.size()) != B * T) {
    return absl::InvalidArgumentError(
        absl::StrCat("token_ids has ", in.token_ids.size(), " ids, expected B*T = ", B * T));
  }
  if (!in.mask.empty() && in.mask.size() != in.token_ids.size()) {
    return absl::InvalidArgumentError("mask must be empty or one entry per token id");
  }
  // Validate every sequence before changing any (Hash validates before it
  // writes, but an earlier sequence would already have been advanced).
  for (int64_t b = 0; b < B; ++b) {
    if (in.sequences[b] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", b, " is null"));
    }
    const int64_t sp = in.start_positions[b];
    const SequenceState& seq = in.sequences[b]->rep_->state;
    if (sp < 0 || sp > seq.length() || sp + T > seq.capacity()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", b, ": start position ", sp, " with ", T, " tokens does not fit (it holds ",
          seq.length(), " of ", seq.capacity(), " positions)"));
    }
    for (int64_t t = 0; t < T; ++t) {
      const int64_t id = in.token_ids[b * T + t];
      if (id < 0 || id >= c.hasher->layout().vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("sequence ", b, ": token id ", id,
                                                       " is outside the vocabulary [0, ",
                                                       c.hasher->layout().vocab_size, ")"));
      }
    }
  }
  std::unique_ptr<StepEngine> engine = c.steps->Take();
  const std::span<RowId> ids = engine->BeginStep(B, T, began);
  const size_t per_seq = static_cast<size_t>(T) * c.hasher->ids_per_position();
  for (int64_t b = 0; b < B; ++b) {
    std::span<const uint8_t> m;
    if (!in.mask.empty()) m = in.mask.subspan(b * T, T);
    absl::Status s = c.hasher->Hash(in.sequences[b]->rep_->state, in.start_positions[b],
                                    in.token_ids.subspan(b * T, T), m, ids.data() + b * per_seq);
    if (!s.ok()) {  // unreachable after the checks above
      c.steps->Return(std::move(engine));
      return s;
    }
  }
  engine->SendStep();
  return Step(std::move(engine));
}

}  // namespace engram

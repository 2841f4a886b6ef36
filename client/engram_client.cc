#include "client/engram_client.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/engram_client_impl.h"
#include "client/local_cache.h"
#include "client/step_state.h"
#include "common/format/shard_map.h"
#include "common/format/table.h"
#include "common/hash/fast_mod.h"
#include "common/net/shard_addresses.h"
#include "common/net/tls.h"
#include "common/util/status_macros.h"
#include "proto/wire.h"

namespace engram {

namespace {

constexpr uint32_t kLocal = 0x80000000u;  // unique_pos flag: local cache row

// A shard's rows are split over its channels only in RPCs of at least this
// many rows (smaller ones cost more in per-call overhead than they gain).
constexpr size_t kMinRowsPerSplit = 1024;

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

// Decodes the response of `chunk`'s RPC in place (Chunk::MapRows).
absl::Status DecodeChunk(const grpc::ByteBuffer& resp, uint64_t want, StepState::Chunk* chunk) {
  ASSIGN_OR_RETURN(uint64_t v,
                   wire::LocateLookupResponseRows(resp, chunk->rows_bytes(), &chunk->rows));
  if (v != want) {  // never rows of another version
    return absl::FailedPreconditionError(
        absl::StrCat("answered with table version ", v, ", asked for ", want));
  }
  chunk->MapRows();
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<StepState> EngramClient::Impl::TakeState() {
  absl::MutexLock l(&pool_mu);
  if (pool.empty()) {
    auto s = std::make_unique<StepState>();
    s->layers.resize(static_cast<size_t>(n_layers));
    s->advance = [this](StepState& st, int wanted) { Advance(st, wanted); };
    return s;
  }
  auto s = std::move(pool.back());
  pool.pop_back();
  return s;
}

void EngramClient::Impl::ReturnState(std::unique_ptr<StepState> s) {
  s->rpcs.clear();
  for (size_t i = 0; i < s->chunks_used; ++i) s->chunks[i]->Clear();
  s->chunks_used = 0;
  absl::MutexLock l(&pool_mu);
  if (pool.size() < 64) pool.push_back(std::move(s));
}

RpcPolicy EngramClient::Impl::Policy() const {
  RpcPolicy p;
  p.deadline = options.rpc_deadline;
  p.hedge = options.hedge;
  if (p.hedge) {
    p.hedge_delay = options.hedge_delay > absl::ZeroDuration()
                        ? options.hedge_delay
                        : std::max(latency.P95(), options.min_hedge_delay);
  }
  return p;
}

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
  c.version = c.options.version != 0 ? c.options.version : c.shard_map.version;
  if (c.version == c.manifest.version) c.source_checksum = c.manifest.source_checksum();
  c.n_layers = c.hasher->n_layers();
  c.n_cols = c.hasher->n_cols();
  c.n_shards = static_cast<int>(c.shard_map.n_shards);
  {
    absl::MutexLock l(&c.stats_mu);
    c.shard_latency_sum.assign(static_cast<size_t>(c.n_shards), 0.0);
    c.shard_rpcs.assign(static_cast<size_t>(c.n_shards), 0);
  }
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
  auto client = std::unique_ptr<EngramClient>(new EngramClient(std::move(impl)));
  if (c.options.metrics_registry != nullptr) {
    EngramClient* self = client.get();
    ASSIGN_OR_RETURN(client->impl_->metrics,
                     ClientMetrics::Create(c.options.metrics_registry, c.n_shards,
                                           [self] { return self->stats(); }));
  }
  if (client->impl_->options.local_cache_bytes > 0) {
    ASSIGN_OR_RETURN(std::unique_ptr<LocalCache> cache, LocalCache::Build(*client));
    client->impl_->local_cache = std::move(cache);
  }
  return client;
}

EngramClient::EngramClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EngramClient::~EngramClient() {
  // First: its last refresh reads stats() from a whole Impl.
  if (impl_ != nullptr) impl_->metrics.reset();
}

const HashLayout& EngramClient::layout() const { return impl_->hasher->layout(); }
int EngramClient::n_layers() const { return impl_->n_layers; }
int EngramClient::n_cols() const { return impl_->n_cols; }
int EngramClient::n_shards() const { return impl_->n_shards; }
int EngramClient::row_bytes(int layer) const { return impl_->manifest.layers[layer].row_bytes; }
int EngramClient::head_dim(int layer) const { return impl_->manifest.layers[layer].head_dim; }
RowEncoding EngramClient::encoding(int layer) const {
  return impl_->manifest.layers[layer].encoding;
}
size_t EngramClient::OutputRowBytes(int layer, RowFormat format) const {
  return FormatRowBytes(impl_->manifest.layers[layer], format);
}

std::unique_ptr<Sequence> EngramClient::NewSequence() const {
  return std::make_unique<Sequence>(impl_->options.sequence_capacity);
}

absl::Duration EngramClient::RecentP95() const { return impl_->latency.P95(); }

ClientStats EngramClient::stats() const {
  const Impl& c = *impl_;
  ClientStats s;
  s.steps = c.steps.load();
  s.ids = c.ids.load();
  s.unique_rows = c.unique_rows.load();
  s.local_hits = c.local_hits.load();
  s.rows_fetched = c.rows_fetched.load();
  s.bytes_received = c.counters.bytes_received.load();
  s.bytes_sent = c.counters.bytes_sent.load();
  s.rpcs = c.counters.rpcs.load();
  s.retries = c.counters.retries.load();
  s.stream_answers = c.counters.stream_answers.load();
  s.hedges = c.counters.hedges.load();
  s.failed_rpcs = c.counters.failed.load();
  absl::MutexLock l(&impl_->stats_mu);
  s.shard_latency_sum_seconds = c.shard_latency_sum;
  s.shard_rpcs = c.shard_rpcs;
  return s;
}

// De-duplicates layer `layer`'s ids of the step and groups the rows to fetch
// by shard. Ids are [B][T][L][C]; the layer's ids are visited in
// [B][T][C] order, which is also the output order.
void EngramClient::Impl::Dedup(StepState& st, int layer) {
  StepState::Layer& ly = st.layers[layer];
  const size_t bt = static_cast<size_t>(st.batch * st.tokens);
  const size_t C = static_cast<size_t>(n_cols);
  const size_t n = bt * C;
  // The layer's ids in a row first: the index's probes are cache misses,
  // so each is prefetched a few ids ahead.
  ly.layer_ids.resize(n);
  for (size_t p = 0; p < bt; ++p) {
    std::memcpy(&ly.layer_ids[p * C],
                &st.ids[(p * static_cast<size_t>(n_layers) + static_cast<size_t>(layer)) * C],
                C * sizeof(RowId));
  }
  DedupIds(ly);
}

void EngramClient::Impl::DedupIds(StepState::Layer& ly) {
  const size_t n = ly.layer_ids.size();
  ly.seen.Reset(n);
  ly.unique_rows.clear();
  ly.id_unique.resize(n);
  constexpr size_t kAhead = 16;
  for (size_t i = 0; i < std::min(n, kAhead); ++i) ly.seen.Prefetch(ly.layer_ids[i]);
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) ly.seen.Prefetch(ly.layer_ids[i + kAhead]);
    const RowId row = ly.layer_ids[i];
    const uint32_t next = static_cast<uint32_t>(ly.unique_rows.size());
    const uint32_t u = ly.seen.FindOrInsert(row, next);
    if (u == next) ly.unique_rows.push_back(row);
    ly.id_unique[i] = u;
  }
}

void EngramClient::Impl::GroupLayer(StepState& st, int layer) {
  StepState::Layer& ly = st.layers[layer];
  const size_t u = ly.unique_rows.size();
  // Count rows per shard (local-cache rows are not fetched).
  std::vector<uint32_t>& start = ly.shard_start;
  start.assign(static_cast<size_t>(n_shards) + 1, 0);
  ly.unique_pos.resize(u);
  const FastModulo shard_of(static_cast<uint64_t>(n_shards));
  uint64_t local = 0;
  for (size_t k = 0; k < u; ++k) {
    const uint64_t row = ly.unique_rows[k];
    if (local_cache != nullptr && local_cache->Contains(static_cast<uint32_t>(layer), row)) {
      ly.unique_pos[k] = kLocal;
      ++local;
      continue;
    }
    ly.unique_pos[k] = 0;
    ++start[shard_of.Mod(row) + 1];
  }
  for (int s = 0; s < n_shards; ++s) start[s + 1] += start[s];
  const size_t fetched = start[n_shards];
  ly.grouped.resize(fetched);
  ly.fetched_src.resize(fetched);
  std::vector<uint32_t> fill(start.begin(), start.end() - 1);
  for (size_t k = 0; k < u; ++k) {
    if (ly.unique_pos[k] == kLocal) continue;
    const uint64_t row = ly.unique_rows[k];
    const uint32_t pos = fill[shard_of.Mod(row)]++;
    ly.grouped[pos] = row;
    ly.unique_pos[k] = pos;
  }
  local_hits.fetch_add(local, std::memory_order_relaxed);
  rows_fetched.fetch_add(fetched, std::memory_order_relaxed);
}

void EngramClient::Impl::SendLayers(StepState& st, int first, int last) {
  for (int l = first; l <= last; ++l) GroupLayer(st, l);
  // Per shard, one RPC for the rows of all these layers, cut into several
  // when over max_rows_per_rpc.
  const RpcPolicy policy = Policy();
  std::vector<ShardRpc*> to_start;
  std::vector<wire::LayerRowIds> request;
  {
    absl::MutexLock l(&st.mu);
    for (int s = 0; s < n_shards; ++s) {
      int layer = first;
      size_t at = st.layers[first].shard_start[s];
      // With several channels per replica a shard's rows go out as that many
      // RPCs (round-robin over the channels), so every connection carries
      // a share of the step; never below kMinRowsPerSplit rows each.
      size_t shard_rows = 0;
      for (int k = first; k <= last; ++k) {
        shard_rows += st.layers[k].shard_start[s + 1] - st.layers[k].shard_start[s];
      }
      const size_t per_replica = static_cast<size_t>(std::max(1, options.channels_per_replica));
      const size_t limit = std::min<size_t>(
          options.max_rows_per_rpc,
          std::max(kMinRowsPerSplit, (shard_rows + per_replica - 1) / per_replica));
      while (true) {
        // The next chunk: pieces of consecutive layers, up to the limit.
        if (st.chunks_used == st.chunks.size()) {
          st.chunks.push_back(std::make_unique<StepState::Chunk>());
        }
        StepState::Chunk* chunk = st.chunks[st.chunks_used].get();
        chunk->pieces.clear();
        chunk->shard = s;
        chunk->done = false;
        request.clear();
        size_t rows = 0;
        while (layer <= last && rows < limit) {
          StepState::Layer& ly = st.layers[layer];
          const size_t end = ly.shard_start[s + 1];
          if (at < end) {
            const size_t n = std::min<size_t>(end - at, limit - rows);
            chunk->pieces.push_back({layer, n,
                                     static_cast<size_t>(manifest.layers[layer].row_bytes),
                                     ly.fetched_src.data() + at});
            request.push_back({static_cast<uint32_t>(layer),
                               std::span<const uint64_t>(ly.grouped.data() + at, n)});
            rows += n;
            at += n;
          }
          if (at == end && ++layer <= last) at = st.layers[layer].shard_start[s];
        }
        if (chunk->pieces.empty()) break;
        ++st.chunks_used;
        for (const StepState::Chunk::Piece& piece : chunk->pieces) {
          ++st.layers[piece.layer].pending;
        }
        grpc::Slice slice =
            wire::EncodeLookupRequest(shard_map.table, version, request, source_checksum);
        StepState* stp = &st;
        const uint64_t want = version;
        const size_t response_bytes = wire::LookupResponseSize(want, chunk->rows_bytes());
        auto rpc = std::make_unique<ShardRpc>(
            channels.get(), &counters, &latency, s, std::move(slice), response_bytes,
            [chunk, want](const grpc::ByteBuffer& resp) { return DecodeChunk(resp, want, chunk); },
            [stp, chunk](const absl::Status& status) { stp->OnRpcDone(*chunk, status); },
            [stp] { stp->OnRpcQuiet(); });
        ++st.not_quiet;
        to_start.push_back(rpc.get());
        st.rpcs.push_back(std::move(rpc));
      }
    }
    // From here a waiter may trust `pending`: every RPC that will deliver
    // these layers' rows is counted.
    for (int k = first; k <= last; ++k) st.layers[k].sent = true;
    st.cv.SignalAll();
  }
  // Spread first attempts over replicas, so replicas share the load.
  for (ShardRpc* rpc : to_start) {
    const int replicas = channels->n_replicas(rpc->shard());
    rpc->Start(policy, static_cast<int>(st.number % static_cast<uint64_t>(replicas)));
  }
}

void EngramClient::Impl::Advance(StepState& st, int wanted) {
  while (true) {
    int layer;
    {
      absl::MutexLock l(&st.mu);
      if (st.releasing || st.next_to_send >= st.deduped) return;
      if (options.pipeline_layers) {
        const bool previous_in =
            st.next_to_send == 0 ||
            (st.layers[st.next_to_send - 1].sent && st.layers[st.next_to_send - 1].pending == 0);
        if (st.next_to_send > wanted && !previous_in) return;
      }
      layer = st.next_to_send++;  // claimed: no other thread sends it
    }
    SendLayers(st, layer, layer);
  }
}

absl::StatusOr<Step> EngramClient::Impl::FetchRows(const std::vector<std::vector<uint64_t>>& rows) {
  std::unique_ptr<StepState> st = TakeState();
  st->batch = 0;
  st->tokens = 0;
  st->ids.clear();
  st->unique_rows = 0;
  for (int l = 0; l < n_layers; ++l) {
    StepState::Layer& ly = st->layers[l];
    ly.pending = 0;
    ly.sent = false;
    ly.status = absl::OkStatus();
    ly.resolved = false;
    ly.id_unique.clear();
    ly.unique_rows = rows[l];
    st->unique_rows += rows[l].size();
  }
  st->ResetProgress(/*next_to_send=*/n_layers, /*deduped=*/n_layers);  // sent right here
  st->prefetched = absl::Now();
  std::unique_ptr<LocalCache> no_cache = std::move(local_cache);
  SendLayers(*st, 0, n_layers - 1);
  local_cache = std::move(no_cache);
  return Step(this, std::move(st));
}

std::vector<const uint8_t*> EngramClient::Impl::UniqueRowSources(Step& step, int layer) {
  StepState::Layer& ly = step.state_->layers[layer];
  std::vector<const uint8_t*> out(ly.unique_rows.size());
  for (size_t k = 0; k < out.size(); ++k) {
    out[k] = ly.fetched_src[ly.unique_pos[k]];
  }
  return out;
}

uint64_t EngramClient::local_cache_bytes() const {
  return impl_->local_cache == nullptr ? 0 : impl_->local_cache->bytes();
}

absl::StatusOr<Step> EngramClient::Prefetch(const StepInput& in) {
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
  std::unique_ptr<StepState> st = c.TakeState();
  st->batch = B;
  st->tokens = T;
  const size_t per_seq = static_cast<size_t>(T) * c.hasher->ids_per_position();
  st->ids.resize(static_cast<size_t>(B) * per_seq);
  // Validate every sequence before changing any (Hash validates before it
  // writes, but an earlier sequence would already have been advanced).
  for (int64_t b = 0; b < B; ++b) {
    if (in.sequences[b] == nullptr) {
      c.ReturnState(std::move(st));
      return absl::InvalidArgumentError(absl::StrCat("sequence ", b, " is null"));
    }
    const int64_t sp = in.start_positions[b];
    const SequenceState& seq = in.sequences[b]->state_;
    if (sp < 0 || sp > seq.length() || sp + T > seq.capacity()) {
      c.ReturnState(std::move(st));
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", b, ": start position ", sp, " with ", T, " tokens does not fit (it holds ",
          seq.length(), " of ", seq.capacity(), " positions)"));
    }
    for (int64_t t = 0; t < T; ++t) {
      const int64_t id = in.token_ids[b * T + t];
      if (id < 0 || id >= c.hasher->layout().vocab_size) {
        c.ReturnState(std::move(st));
        return absl::InvalidArgumentError(absl::StrCat("sequence ", b, ": token id ", id,
                                                       " is outside the vocabulary [0, ",
                                                       c.hasher->layout().vocab_size, ")"));
      }
    }
  }
  for (int64_t b = 0; b < B; ++b) {
    std::span<const uint8_t> m;
    if (!in.mask.empty()) m = in.mask.subspan(b * T, T);
    absl::Status s =
        c.hasher->Hash(in.sequences[b]->state_, in.start_positions[b],
                       in.token_ids.subspan(b * T, T), m, st->ids.data() + b * per_seq);
    if (!s.ok()) {  // unreachable after the checks above
      c.ReturnState(std::move(st));
      return s;
    }
  }
  st->unique_rows = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    StepState::Layer& ly = st->layers[l];
    ly.pending = 0;
    ly.sent = false;
    ly.status = absl::OkStatus();
    ly.resolved = false;
  }
  st->ResetProgress(/*next_to_send=*/0, /*deduped=*/0);
  st->number = c.steps.load(std::memory_order_relaxed);
  st->prefetched = absl::Now();
  for (int l = 0; l < c.n_layers; ++l) st->layers[l].arrived = st->prefetched;
  // Layers go out in order, each as soon as it is de-duplicated (the first
  // Engram layer's rows are needed first, and the shards start on them
  // while the later layers are still being de-duplicated here).
  for (int l = 0; l < c.n_layers; ++l) {
    c.Dedup(*st, l);
    st->unique_rows += st->layers[l].unique_rows.size();
    {
      absl::MutexLock lock(&st->mu);
      st->deduped = l + 1;
    }
    c.Advance(*st, 0);
  }
  c.steps.fetch_add(1, std::memory_order_relaxed);
  c.ids.fetch_add(st->ids.size(), std::memory_order_relaxed);
  c.unique_rows.fetch_add(st->unique_rows, std::memory_order_relaxed);
  return Step(impl_.get(), std::move(st));
}

// Fills the layer's per-id source pointers once its rows are in.
void EngramClient::Impl::Resolve(StepState& st, int layer) {
  StepState::Layer& ly = st.layers[layer];
  ly.src.resize(ly.id_unique.size());
  for (size_t i = 0; i < ly.id_unique.size(); ++i) {
    const uint32_t k = ly.id_unique[i];
    const uint32_t pos = ly.unique_pos[k];
    ly.src[i] = pos == kLocal ? local_cache->Find(static_cast<uint32_t>(layer), ly.unique_rows[k])
                              : ly.fetched_src[pos];
  }
  ly.resolved = true;
}

}  // namespace engram

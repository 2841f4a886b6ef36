// Public header of the client library (with client/engram_types.h, the
// value types it uses; a worker needs no other header of ours).
//
// EngramClient: the library inference workers link to fetch Engram rows.
//
// Per step, a worker hands the client its sequences' new token ids at token
// time. Prefetch() hashes them (bit-exact, locally), de-duplicates the row
// ids across the batch and across layers, routes them to shards
// (row % n_shards), and sends batched Lookups without blocking: one per
// (shard, layer), later layers going out as the earlier ones arrive
// (ClientOptions::pipeline_layers, the default) or each as soon as it is
// de-duplicated; more when over Options::max_rows_per_rpc. Wait() blocks only
// until one layer's rows are in, then writes them in [B, T, n_cols, row]
// order into the caller's buffer: raw stored rows, or dequantised f32/bf16.
// A worker can Wait for the first Engram layer while the second's rows are
// still in flight.
//
// Faults: every RPC has a deadline, and every step one
// (ClientOptions::step_deadline); on UNAVAILABLE or DEADLINE_EXCEEDED the
// shard's next replica is tried; optionally a hedged request goes to a second
// replica after a delay. When no replica of a shard answers, Wait fails with
// UNAVAILABLE naming the shard: rows are never zeros or stale.
//
// Threading: EngramClient is thread-safe; steps may be prefetched and waited
// on concurrently from many threads. A Sequence is used by one Prefetch at a
// time (calls naming it must not overlap); Prefetch hashes its tokens before
// it returns and the step keeps nothing of the Sequence, so its next tokens
// may be prefetched while an earlier step's rows are still in flight. A Step
// is used by one thread at a time.
//
// Chunked prefill: a prefill's tokens are known up front, so prefetch chunk
// k + 1 as chunk k's compute begins, and its rows arrive while chunk k
// computes (only the first chunk's fetch is exposed):
//
//   Step current = *client.Prefetch(chunk 0);
//   for (k = 0; k < chunks; ++k) {
//     std::optional<Step> next;
//     if (k + 1 < chunks) next = *client.Prefetch(chunk k + 1);
//     ... blocks of chunk k, each Engram layer's block calling
//         current.Wait(layer, format, out) ...
//     if (next) current = std::move(*next);
//   }
#ifndef ENGRAM_CLIENT_ENGRAM_CLIENT_H_
#define ENGRAM_CLIENT_ENGRAM_CLIENT_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/engram_types.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace engram {

// How Lookups travel (docs/wire-protocol.md).
enum class Transport {
  // The shard's row stream (the same Lookup messages framed on a plain TCP
  // connection, its port learned from Info) where the replica offers one,
  // else gRPC. Within a few percent of a bare TCP exchange.
  kRowStream,
  // gRPC (HTTP/2) only.
  kGrpc,
};

struct ClientOptions {
  // Table directory (its manifest.json gives the hash layout and the row
  // geometry). REQUIRED.
  std::string table_dir;
  // The shard map written by `engramctl import` (any shard's copy). Empty =
  // derived from the manifest with shard_addresses.size() shards (servers
  // still refuse rows that are not theirs, so a wrong count fails loudly).
  std::string shard_map_path;
  // Addresses, [shard][replica] "host:port". Empty = the shard map's
  // `replicas`. Each shard needs at least one.
  std::vector<std::vector<std::string>> shard_addresses;
  // Table version to ask for; 0 = the shard map's version.
  uint64_t version = 0;

  // Transport of the Lookups (the default: the row stream where offered).
  Transport transport = Transport::kRowStream;
  // Deadline of one RPC attempt (also bounds a row stream's connect).
  absl::Duration rpc_deadline = absl::Seconds(2);
  // The longest a step's layer may take from Prefetch until its rows are
  // in, whatever retries, fail-overs and hedges happen meanwhile: past it,
  // Wait fails with DEADLINE_EXCEEDED naming the layer and the shards that
  // had not answered. InfiniteDuration() = only the RPC deadlines bound it.
  absl::Duration step_deadline = absl::Seconds(5);
  // Row ids per Lookup RPC; a shard's batch over this is split.
  uint32_t max_rows_per_rpc = 16384;
  // gRPC channels per replica (separate TCP connections), and as many row
  // stream connections; RPCs of a step
  // round-robin over them, and a shard's rows of a step are split into this
  // many RPCs (of at least 1,024 rows each) so every connection carries a
  // share.
  int channels_per_replica = 1;
  // Hedging: when a shard has a second replica, send the same request to it
  // if the first has not answered after `hedge_delay`; zero = the p95 of
  // recent RPC latencies (at least `min_hedge_delay`). Off by default.
  bool hedge = false;
  absl::Duration hedge_delay = absl::ZeroDuration();
  absl::Duration min_hedge_delay = absl::Microseconds(500);
  // Send a layer's requests only once the layer before it has arrived (or a
  // Wait asks for it), so the first Engram layer, whose prefetch window is a
  // single block, does not share the shards (and this process) with the
  // later ones: what `engramctl plan --fetch-order sequential` models. Off:
  // each layer is sent during Prefetch as soon as it is de-duplicated, so
  // the shards serve the first while the client de-duplicates the next (the
  // most rows per second for a closed loop), and with a disk tail a later
  // layer's reads start at once, earliest need-by first (block_time;
  // `--fetch-order deadline`). Keep it on with a tail too unless the later
  // layer's tail cannot be read inside its window after the first layer's
  // arrival: the later layer's gather and reads at Prefetch cost the first
  // layer more than its window holds (docs/benchmarks.md, "Tables larger
  // than RAM").
  bool pipeline_layers = true;
  // The worker's time per transformer block. Each Lookup tells its shard
  // when the rows are needed (LookupRequest.need_within_us): for Engram
  // layer l, at transformer block b = layout.engram_layer_ids[l], the time
  // left until Prefetch's start + b * block_time when the request is sent
  // (at least 1 us), so the shards' disk readers serve layer 1's rows
  // before layer 14's, and every worker's before later ones. 500 us: the
  // order of a DeepSeek-V4.1-Flash decode step's block. Zero = send no
  // need-by (the shards then order by the RPC's deadline).
  absl::Duration block_time = absl::Microseconds(500);
  // Reconnect backoff of the channels.
  absl::Duration max_reconnect_backoff = absl::Seconds(2);

  // TLS to the shards, gRPC and row stream (ShardServerOptions::tls_*):
  // the CA of their certificates (PEM); empty = plaintext. With
  // tls_cert_file and tls_key_file too, the client presents that
  // certificate (mutual TLS).
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // The name the shards' certificates must carry; empty = each address's
  // host (a DNS name or an IP address).
  std::string tls_server_name;
  // Bearer token sent with every call (ShardServerOptions::auth_token_file);
  // empty = none.
  std::string auth_token;
  // (gRPC transport) HTTP/2 bandwidth-delay probing (pings that size the flow-control
  // windows and socket reads to the measured bandwidth). On: for
  // throughput on multi-MB replies. Off: no probe pings and a fixed receive
  // window of `http2_window_bytes` per stream, for a latency-bound decode
  // loop over several shards, where the probes stall some steps. Figures:
  // docs/benchmarks.md, "Settings chosen by measurement".
  bool http2_bdp_probe = true;
  uint32_t http2_window_bytes = 16 << 20;

  // Worker-side hot-row cache: the hottest rows of the hot-row profiles
  // kept in this process, so the most frequent n-grams never cross the
  // network. 0 = off (the default). `worker_cache_profiles[i]` is shard i's
  // `hot_profile.bin` (written by `engramctl import --profile-trace`); the
  // rows are fetched from the shards once, at Create.
  uint64_t worker_cache_bytes = 0;
  std::vector<std::string> worker_cache_profiles;

  // Positions each Sequence can hold.
  int64_t sequence_capacity = kDefaultSequenceCapacity;
  // Optional: the client's counters are also registered here as
  // engram_client_* series (prometheus-cpp), brought up to date from
  // stats() once a second by a thread of the client and once more when the
  // client is destroyed. Serve it with the worker's prometheus::Exposer.
  std::shared_ptr<prometheus::Registry> metrics_registry;

  // InvalidArgument naming the first bad field; checks the options alone,
  // without reading any file (Create() checks them too, first).
  absl::Status Validate() const;
};

// How Wait writes rows.
// kF32 and kBf16 decode the layer's encoding (encoding(layer)) bit for bit
// as ggml's reference does (e4m3_e8m0 rows as common/codec/fp8.h says).
enum class RowFormat {
  kRaw,   // the stored bytes, row_bytes(layer) of them, in the layer's encoding
  kF32,   // head_dim floats
  kBf16,  // head_dim bf16 values (uint16_t), each f32 rounded to nearest even
};

// The n-gram state of one sequence (prefill, then decode steps).
class Sequence {
 public:
  explicit Sequence(int64_t capacity);
  ~Sequence();
  Sequence(Sequence&&) noexcept;
  Sequence& operator=(Sequence&&) noexcept;

  // Positions held (the next decode step starts here).
  int64_t length() const;
  // Forgets the sequence; its next step must start at position 0.
  void Reset();

 private:
  friend class EngramClient;
  struct Rep;  // the hash's per-sequence state
  std::unique_ptr<Rep> rep_;
};

// One step's tokens. Every sequence contributes `tokens_per_sequence` ids,
// at its own start position (0 = a new generation; otherwise at most the
// sequence's length).
struct StepInput {
  std::span<Sequence* const> sequences;
  std::span<const int64_t> start_positions;  // one per sequence
  int64_t tokens_per_sequence = 1;
  std::span<const int64_t> token_ids;  // [B][T]
  std::span<const uint8_t> mask;       // empty, or [B][T]; 0 = image
};

// Counters of one client since Create. All monotonic.
struct ClientStats {
  uint64_t steps = 0;
  uint64_t ids = 0;             // row ids hashed (B * T * layers * cols)
  uint64_t unique_rows = 0;     // after de-duplication
  uint64_t local_hits = 0;      // unique rows served by the local cache
  uint64_t rows_fetched = 0;    // unique rows received from shards
  uint64_t bytes_received = 0;  // response bytes (Lookup messages, unframed)
  uint64_t bytes_sent = 0;      // request bytes (Lookup messages, unframed)
  uint64_t rpcs = 0;
  uint64_t stream_answers = 0;  // attempts answered over a row stream (rest: gRPC)
  uint64_t retries = 0;         // attempts on another replica after a failure
  uint64_t hedges = 0;          // hedged attempts sent
  uint64_t failed_rpcs = 0;     // RPCs no replica answered
  std::vector<double> shard_latency_sum_seconds;  // per shard, successful RPCs
  std::vector<uint64_t> shard_rpcs;               // per shard, successful RPCs
};

class Step;
class StepEngine;

class EngramClient {
 public:
  // Makes a client of the table in options.table_dir.
  //
  // Reads: table_dir/manifest.json (hash layout, row geometry), the shard
  // map at options.shard_map_path when given, and with a local cache each
  // of options.worker_cache_profiles.
  //
  // Blocks: only to fill the local cache (worker_cache_bytes > 0), whose
  // rows it fetches from the shards with one step's RPCs (each bounded by
  // rpc_deadline). Otherwise it opens no connection: channels connect, and
  // replicas are asked for their row stream port (Info), in the background
  // and on first use, so a shard that is down fails the first step that
  // needs it (UNAVAILABLE / DEADLINE_EXCEEDED), not Create.
  //
  // Errors:
  //   InvalidArgument     options.Validate() fails; no shard map and no
  //                       addresses; the number of address lists is not the
  //                       shard count; a shard without an address; as many
  //                       local-cache profiles as shards are not given.
  //   NotFound, DataLoss, InvalidArgument (with the path)
  //                       the manifest, shard map or a profile is missing,
  //                       unreadable or malformed (TableManifest::Load,
  //                       ShardMap::Load).
  //   FailedPrecondition  the shard map is for another table, or disagrees
  //                       with the manifest on the layers, their rows or row
  //                       bytes.
  //   UNAVAILABLE, DEADLINE_EXCEEDED, ...
  //                       filling the local cache failed: the failed RPC's
  //                       status, naming the shard.
  static absl::StatusOr<std::unique_ptr<EngramClient>> Create(ClientOptions options);
  ~EngramClient();

  const TableLayout& layout() const;
  int n_layers() const;
  int n_cols() const;
  int n_shards() const;
  // Stored bytes per row and values per row of `layer`.
  int row_bytes(int layer) const;
  int head_dim(int layer) const;
  // How layer's stored rows encode their values (the table manifest's).
  StoredEncoding encoding(int layer) const;
  // Bytes Wait writes per row in `format` for `layer`.
  size_t OutputRowBytes(int layer, RowFormat format) const;

  std::unique_ptr<Sequence> NewSequence() const;

  // Hashes the step and sends its lookups; returns without waiting for
  // them. Errors (bad tokens, positions) are returned here and leave every
  // sequence unchanged.
  absl::StatusOr<Step> Prefetch(const StepInput& input);

  // Fetches rows by id, for a worker that hashes itself: `ids` are row ids
  // of `layer`'s table (as the hash writes them, offsets included), in any
  // number and order. De-duplicates them, routes them and fetches them as a
  // step's layer (same RPCs, deadlines, fail-over and local cache), then
  // writes row i of OutputRowBytes(layer, format) bytes at out[i * that].
  // Blocks until the rows are written or the step deadline passes. Counts
  // in stats() as ids and unique rows, not as a step.
  // Errors: InvalidArgument (no such layer, an id outside the layer's
  // table, out.size() != ids.size() * OutputRowBytes) before any RPC;
  // otherwise Wait's (UNAVAILABLE / DEADLINE_EXCEEDED naming the shard).
  absl::Status LookupInto(int layer, std::span<const RowId> ids, RowFormat format,
                          std::span<uint8_t> out);

  ClientStats stats() const;
  // Bytes of rows held by the local cache (0 when off).
  uint64_t worker_cache_bytes() const;
  // The p95 latency of recent RPCs (what hedging waits for by default).
  absl::Duration RecentP95() const;

 private:
  struct Impl;
  explicit EngramClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A prefetched step. Movable. Destroying it waits for its RPCs to finish
// (or be cancelled) and returns its buffers to the client's pool.
class Step {
 public:
  Step(Step&&) noexcept;
  Step& operator=(Step&&) noexcept;
  ~Step();

  int64_t batch() const;
  int64_t tokens_per_sequence() const;
  // Unique rows of this step (over all layers) after de-duplication.
  uint64_t unique_rows() const;
  // The row ids of the step, [B][T][n_layers][n_cols].
  std::span<const RowId> row_ids() const;

  // Blocks until `layer`'s rows are in, then writes them [B][T][n_cols]
  // rows of OutputRowBytes(layer, format) bytes into out. REQUIRES:
  // out.size() == B * T * n_cols * OutputRowBytes(layer, format).
  // UNAVAILABLE / DEADLINE_EXCEEDED name the shard that failed.
  absl::Status Wait(int layer, RowFormat format, std::span<uint8_t> out);
  // Blocks until `layer`'s rows are in (or failed), without copying.
  absl::Status WaitArrived(int layer);
  // Never blocks: true when WaitArrived(layer) would return at once (the
  // layer's rows are in, it failed, or the step deadline has passed).
  // InvalidArgument for no such layer, FailedPrecondition on a moved-from
  // step.
  absl::StatusOr<bool> Arrived(int layer);
  // Time from Prefetch to the arrival of `layer`'s last RPC (blocks like
  // WaitArrived; infinite when the layer failed).
  absl::Duration FetchLatency(int layer);

 private:
  friend class EngramClient;
  explicit Step(std::unique_ptr<StepEngine> engine);
  // Cancels what is still in flight, waits for it, gives the engine back
  // to its pool.
  void Release();
  std::unique_ptr<StepEngine> engine_;  // null once moved from
};

}  // namespace engram

#endif  // ENGRAM_CLIENT_ENGRAM_CLIENT_H_

// StepEngine: one step of the client library, from its row ids to the rows
// in the caller's buffer; StepPool: what the steps of one client share.
// Internal to the client library.
//
// A step's life, all of it in StepEngine:
//   begin     BeginStep (ids the client hashes into the engine's buffer),
//             or SendLookup (a worker's ids of one layer), or SendRows (the
//             local cache's rows, no cache consulted);
//   de-dup    per layer, an open-addressing index of the step's own;
//   group     the unique rows by shard (row % n_shards, a counting sort),
//             rows the local cache holds set aside;
//   send      one Lookup per shard carrying the layers sent together, split
//             over the replica's channels and at max_rows_per_rpc; with
//             pipeline_layers a layer goes once the one before it arrived;
//             each Lookup carries the time until its earliest layer's
//             transformer block runs (need_within_us, from block_time);
//   on-reply  each RPC reports to its Call (an RpcReceiver): the reply is
//             mapped in place (ReplyChunk), the layer counted in, and the
//             next layer sent, on the thread that read the reply;
//   wait      WaitLayer blocks until a layer's RPCs are done (sending it
//             first if nobody has), bounded by the step deadline;
//   copy-out  CopyOut writes the layer's rows in [B][T][n_cols] (request)
//             order, raw or decoded, straight from the replies.
// Finish cancels what is still in flight and waits until no RPC can call
// back; StepPool::Return then keeps the engine, its buffers and index for
// the next step, so a steady stream of steps allocates nothing per row.
//
// Threading: one thread at a time drives a step (begin, WaitLayer, CopyOut,
// Finish); replies arrive concurrently on the channels' threads. StepPool
// is thread-safe.
#ifndef ENGRAM_CLIENT_STEP_ENGINE_H_
#define ENGRAM_CLIENT_STEP_ENGINE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/engram_client.h"
#include "client/local_cache.h"
#include "client/reply_chunk.h"
#include "client/shard_channels.h"
#include "common/format/table.h"
#include "common/util/key_index.h"
#include "grpcpp/support/byte_buffer.h"

namespace engram {

// Bytes one row of `layer` takes in `format` (EngramClient::OutputRowBytes).
inline size_t FormatRowBytes(const LayerInfo& layer, RowFormat format) {
  const size_t values = static_cast<size_t>(layer.head_dim);
  return format == RowFormat::kRaw   ? static_cast<size_t>(layer.row_bytes)
         : format == RowFormat::kF32 ? values * sizeof(float)
                                     : values * sizeof(uint16_t);
}

// What the steps of one client ask for and how (a plain value, fixed at
// the client's Create).
struct StepConfig {
  std::string table;            // asked for in every Lookup
  uint64_t version = 0;         // likewise; replies of another version are refused
  std::string source_checksum;  // likewise; empty = none
  int n_cols = 0;               // ids per position and layer
  int n_shards = 0;
  std::vector<LayerInfo> layers;  // the manifest's: row bytes, head_dim, encoding
  // ClientOptions' fields of the same names.
  bool pipeline_layers = true;
  int channels_per_replica = 1;
  uint32_t max_rows_per_rpc = 16384;
  absl::Duration step_deadline = absl::Seconds(5);
  absl::Duration rpc_deadline = absl::Seconds(2);
  bool hedge = false;
  absl::Duration hedge_delay = absl::ZeroDuration();
  absl::Duration min_hedge_delay = absl::Microseconds(500);
  absl::Duration block_time = absl::Microseconds(500);

  int n_layers() const { return static_cast<int>(layers.size()); }
};

// LookupRequest.need_within_us for rows of transformer block `block` (an
// Engram layer's LayerInfo::layer_id), sent at `now` in a step begun at
// `step_start` with `block_time` per block: the time left until the block
// runs, step_start + block * block_time - now, in microseconds, at least 1
// (an overdue layer stays the most urgent: 0 would mean "not set") and at
// most uint32's maximum. 0 (none sent) when block_time is zero.
uint32_t NeedWithinMicros(absl::Time step_start, int64_t block, absl::Duration block_time,
                          absl::Time now);

// The steps' monotonic counters (ClientStats reads them).
struct StepCounters {
  std::atomic<uint64_t> steps{0}, ids{0}, unique_rows{0}, local_hits{0}, rows_fetched{0};
  absl::Mutex mu;
  std::vector<double> shard_latency_sum ABSL_GUARDED_BY(mu);  // per shard, successful RPCs
  std::vector<uint64_t> shard_rpcs ABSL_GUARDED_BY(mu);       // likewise
};

class StepEngine;

// The steps of one client: their configuration, the channels they send on,
// the local cache they consult, their counters, and the engines kept for
// reuse. Thread-safe. REQUIRES: `channels` outlives the pool, and every
// engine is returned before the pool is destroyed.
class StepPool {
 public:
  StepPool(StepConfig config, ShardChannels* channels);
  ~StepPool();
  StepPool(const StepPool&) = delete;
  StepPool& operator=(const StepPool&) = delete;

  const StepConfig& config() const { return config_; }
  // The cache later steps consult (null: none). REQUIRES: no step is live.
  void SetLocalCache(const LocalCache* cache) { local_cache_ = cache; }

  // An engine ready for a begin call.
  std::unique_ptr<StepEngine> Take();
  // Finishes the step (StepEngine::Finish), adds its RPCs' latencies to
  // the counters and keeps the engine for a later Take.
  void Return(std::unique_ptr<StepEngine> engine);

  // What the steps counted and measured (ClientStats, RecentP95).
  RpcCounters& rpc_counters() { return rpc_counters_; }
  LatencyWindow& latency() { return latency_; }
  StepCounters& counters() { return counters_; }

 private:
  friend class StepEngine;
  // Deadline and hedging of the next RPCs (the hedge delay follows the
  // recent p95 unless configured).
  RpcPolicy Policy() const;

  const StepConfig config_;
  ShardChannels* const channels_;
  const LocalCache* local_cache_ = nullptr;
  RpcCounters rpc_counters_;
  LatencyWindow latency_;
  StepCounters counters_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<StepEngine>> free_ ABSL_GUARDED_BY(mu_);
};

// One step, as the top of this file tells. Belongs to a Step (or the local
// cache's fill) while in use, to its pool between steps.
class StepEngine {
 public:
  explicit StepEngine(StepPool* pool);
  ~StepEngine();
  StepEngine(const StepEngine&) = delete;
  StepEngine& operator=(const StepEngine&) = delete;

  StepPool* pool() const { return pool_; }

  // ---- begin and send: exactly one of these per step.

  // Starts a hashed step of `batch` sequences of `tokens` positions: the
  // returned buffer, [batch][tokens][n_layers][n_cols], is for the caller
  // to fill with the step's row ids before SendStep. `began`: when the
  // step began (Prefetch's call), from which each layer's need-by is
  // counted (NeedWithinMicros).
  std::span<RowId> BeginStep(int64_t batch, int64_t tokens, absl::Time began = absl::Now());
  // De-duplicates the step's layers in order, sending each as it is due:
  // layer 0 at once, the others at once too without pipeline_layers, else
  // once the one before arrived (or WaitLayer asks). Counts the step.
  void SendStep();
  // A step of `ids` of `layer` alone (any number, any order, in the
  // layer's table), the other layers empty; sends every RPC now. Counts the
  // ids and unique rows, not a step. REQUIRES: ids not empty.
  void SendLookup(int layer, std::span<const RowId> ids);
  // A step whose unique rows are `rows[layer]` (no de-duplication, no local
  // cache), sent at once. For filling the local cache.
  void SendRows(const std::vector<std::vector<uint64_t>>& rows);

  // ---- wait and copy out. REQUIRES: 0 <= layer < n_layers.

  // Blocks until `layer`'s rows are in or failed, sending the layer first
  // if it is still waiting its turn. Its first RPC's error
  // (UNAVAILABLE / DEADLINE_EXCEEDED naming the shard, ...), or
  // DEADLINE_EXCEEDED naming the shards not heard from once the step
  // deadline has passed since the step was sent.
  absl::Status WaitLayer(int layer);
  // Never blocks: whether WaitLayer(layer) would return at once.
  bool Arrived(int layer);
  // From sending the step to the arrival of `layer`'s last RPC.
  // REQUIRES: WaitLayer(layer) returned OK.
  absl::Duration ArrivalTime(int layer);
  // Writes `layer`'s rows, [B][T][n_cols] in request order, in `format`.
  // InvalidArgument when `out` is not that many rows of
  // FormatRowBytes(layer, format). REQUIRES: WaitLayer(layer) returned OK.
  absl::Status CopyOut(int layer, RowFormat format, std::span<uint8_t> out);
  // The bytes of each of `layer`'s unique rows, in first-seen (for
  // SendRows: given) order. REQUIRES: WaitLayer(layer) returned OK.
  std::vector<const uint8_t*> UniqueRowSources(int layer) const;

  int64_t batch() const { return batch_; }
  int64_t tokens() const { return tokens_; }
  // Unique rows of the step over all layers.
  uint64_t unique_rows() const { return unique_rows_; }
  std::span<const RowId> ids() const { return ids_; }
  // `layer`'s unique rows in first-seen (for SendRows: given) order, and
  // the shard the k-th went to (kLocalShard: found in the local cache).
  // REQUIRES: the layer was sent.
  static constexpr int kLocalShard = -1;
  std::span<const uint64_t> UniqueRows(int layer) const { return layers_[layer].unique_rows; }
  int ShardOfUnique(int layer, size_t k) const;

  // Sends nothing more, cancels the RPCs still in flight and waits until
  // none can call back; forgets their replies. The engine may then begin
  // another step.
  void Finish();

 private:
  // One RPC of the step: its rows and reply (ReplyChunk) and the receiver
  // its ShardRpc reports to. Calls never move (their ShardRpc holds one),
  // and are reused across steps.
  class Call final : public RpcReceiver {
   public:
    explicit Call(StepEngine* engine) : engine_(engine) {}
    absl::Status Decode(const grpc::ByteBuffer& response) override;
    void Done(const absl::Status& status) override;
    void Quiet() override;

    ReplyChunk chunk;
    int shard = 0;      // the shard asked
    bool done = false;  // its RPC finished (engine's mu_)

   private:
    StepEngine* const engine_;
  };

  // Per layer: de-duplicated rows, grouped by shard, and where each of the
  // layer's ids finds its bytes. The fields up to `src` are the step's
  // thread's; sent, pending, status and arrived are guarded by mu_ (a
  // nested struct's fields cannot name it in an annotation).
  struct Layer {
    std::vector<uint64_t> layer_ids;    // scratch: the layer's ids (b,t,c)
    KeySlotIndex seen;                  // row -> unique index
    std::vector<uint64_t> unique_rows;  // in first-seen order
    std::vector<uint32_t> unique_pos;   // unique index -> grouped slot or kLocal
    std::vector<uint64_t> grouped;      // fetched rows, grouped by shard
    std::vector<uint32_t> id_unique;    // id (b,t,c) -> unique index
    std::vector<const uint8_t*> src;    // id (b,t,c) -> row bytes
    // Grouped slot -> the row's bytes, in place in its RPC's reply.
    std::vector<const uint8_t*> fetched_src;
    std::vector<uint32_t> shard_start;  // grouped rows of shard s start here
    bool resolved = false;              // src filled
    bool sent = false;                  // every RPC of the layer is counted
    int pending = 0;                    // RPCs not finished
    absl::Status status;                // first failure
    absl::Time arrived;                 // when pending reached 0
  };

  // A fresh step: `next` layers sent, `ready` de-duplicated, none pending;
  // stamps the step's number and send time.
  void Reset(int next, int ready, const LocalCache* local);
  // Copies layer's ids out of ids_ ([B][T][L][C]) and de-duplicates them.
  void Dedup(int layer);
  // De-duplicates ly.layer_ids into unique_rows and id_unique.
  static void DedupIds(Layer& ly);
  // Groups the layer's unique rows by shard (local-cache rows aside).
  void GroupLayer(int layer);
  // Sends layers [first, last]: one Lookup per shard carrying all of them
  // (several when over the per-RPC limit).
  void SendLayers(int first, int last);
  // Sends the next de-duplicated layers in order: with pipeline_layers each
  // once the one before it has arrived, and every layer up to `wanted` now;
  // without, at once.
  void SendDue(int wanted);
  // A Call's RPC finished (the reply path ends here): counts its layers in
  // and sends the layers now due.
  void OnReply(Call& call, const absl::Status& status);
  void OnQuiet();
  // Fills the layer's per-id row addresses.
  void Resolve(int layer);
  // "1, 3" (or "none"): shards whose RPCs for `layer` (< 0: any) have not
  // finished.
  std::string PendingShardsLocked(int layer) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool LayerInLocked(int layer) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return layers_[layer].sent && layers_[layer].pending == 0;
  }

  StepPool* const pool_;
  const StepConfig& config_;
  const LocalCache* local_ = nullptr;  // this step's: the pool's, or none
  // The client's step count when the step was sent: every layer of the step
  // starts on the same replica of a shard (number % replicas), so a hung
  // replica delays a step once, not in each layer.
  uint64_t number_ = 0;
  int64_t batch_ = 0;
  int64_t tokens_ = 0;
  uint64_t unique_rows_ = 0;
  absl::Time began_;        // when the step began: its layers' need-bys count from here
  absl::Time sent_at_;      // when the step's first RPC could go
  std::vector<RowId> ids_;  // [B][T][L][C]
  std::vector<Layer> layers_;
  std::vector<std::unique_ptr<ShardRpc>> rpcs_;
  // calls_[0, calls_used_) are this step's RPCs'; the rest are kept for
  // reuse. Grows under mu_ (PendingShardsLocked reads it).
  std::vector<std::unique_ptr<Call>> calls_;
  size_t calls_used_ = 0;

  absl::Mutex mu_;
  absl::CondVar cv_;                             // signalled whenever pending or not_quiet_ drops
  int not_quiet_ ABSL_GUARDED_BY(mu_) = 0;       // RPCs that may still call back
  int next_to_send_ ABSL_GUARDED_BY(mu_) = 0;    // layers [0, next_to_send_) are claimed
  int deduped_ ABSL_GUARDED_BY(mu_) = 0;         // layers [0, deduped_) are ready to send
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;  // Finish began: send nothing more
};

}  // namespace engram

#endif  // ENGRAM_CLIENT_STEP_ENGINE_H_

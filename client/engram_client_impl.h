// The state behind EngramClient. Internal to the client library.
#ifndef ENGRAM_CLIENT_ENGRAM_CLIENT_IMPL_H_
#define ENGRAM_CLIENT_ENGRAM_CLIENT_IMPL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/client_metrics.h"
#include "client/engram_client.h"
#include "client/local_cache.h"
#include "client/shard_channels.h"
#include "client/step_state.h"
#include "common/format/shard_map.h"
#include "common/format/table.h"

namespace engram {

// Bytes one row of `layer` takes in `format` (EngramClient::OutputRowBytes).
inline size_t FormatRowBytes(const LayerInfo& layer, RowFormat format) {
  const size_t values = static_cast<size_t>(layer.head_dim);
  return format == RowFormat::kRaw   ? static_cast<size_t>(layer.row_bytes)
         : format == RowFormat::kF32 ? values * sizeof(float)
                                     : values * sizeof(uint16_t);
}

struct EngramClient::Impl {
  ClientOptions options;
  TableManifest manifest;
  ShardMap shard_map;
  std::unique_ptr<NgramHasher> hasher;
  std::unique_ptr<ShardChannels> channels;
  std::unique_ptr<LocalCache> local_cache;
  RpcCounters counters;
  LatencyWindow latency;
  uint64_t version = 0;
  // Sent with every Lookup: the manifest's SourceChecksum (empty when asking
  // for a version other than the manifest's, whose rows it does not describe).
  std::string source_checksum;
  int n_layers = 0, n_cols = 0, n_shards = 0;

  std::atomic<uint64_t> steps{0}, ids{0}, unique_rows{0}, local_hits{0}, rows_fetched{0};
  absl::Mutex stats_mu;
  std::vector<double> shard_latency_sum ABSL_GUARDED_BY(stats_mu);
  std::vector<uint64_t> shard_rpcs ABSL_GUARDED_BY(stats_mu);

  // Last member but the pool: unregisters before the counters go away.
  std::unique_ptr<ClientMetrics> metrics;

  absl::Mutex pool_mu;
  std::vector<std::unique_ptr<StepState>> pool ABSL_GUARDED_BY(pool_mu);

  std::unique_ptr<StepState> TakeState();
  void ReturnState(std::unique_ptr<StepState> s);
  void Dedup(StepState& st, int layer);
  // De-duplicates ly.layer_ids into unique_rows and id_unique.
  void DedupIds(StepState::Layer& ly);
  // Groups the layer's unique rows by shard (local-cache rows aside).
  void GroupLayer(StepState& st, int layer);
  // Sends layers [first, last]: one Lookup per shard carrying all of them
  // (several when over max_rows_per_rpc).
  void SendLayers(StepState& st, int first, int last);
  // Sends the step's next de-duplicated layers in order, one Lookup per
  // shard each: with options.pipeline_layers each once the one before it
  // has arrived, and every layer up to `wanted` now; without, at once.
  void Advance(StepState& st, int wanted);
  void Resolve(StepState& st, int layer);
  RpcPolicy Policy() const;
  // A step whose unique rows are `rows[layer]` (no hashing, no local
  // cache), sent at once. For filling the local cache.
  absl::StatusOr<Step> FetchRows(const std::vector<std::vector<uint64_t>>& rows);
  // The bytes of each unique row of `layer`, in unique order.
  // REQUIRES: step.WaitArrived(layer) returned OK.
  std::vector<const uint8_t*> UniqueRowSources(Step& step, int layer);
};

}  // namespace engram

#endif  // ENGRAM_CLIENT_ENGRAM_CLIENT_IMPL_H_

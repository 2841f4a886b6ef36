#include "service/shard_metrics.h"

#include <string>

#include "absl/status/status.h"

namespace engram {
namespace {

constexpr const char* kMethodNames[] = {"Lookup", "Info"};

// 50 us .. ~1.6 s, doubling.
metrics::Histogram::BucketBoundaries LatencyBuckets() {
  return metrics::ExponentialBuckets(50e-6, 2.0, 16);
}

}  // namespace

ShardMetrics::ShardMetrics(metrics::Registry& registry, int n_layers)
    : requests_(metrics::BuildCounter()
                    .Name("engram_shard_requests_total")
                    .Help("Finished RPCs by method and status code.")
                    .Register(registry)),
      disk_read_duration_(metrics::BuildHistogram()
                              .Name("engram_shard_disk_read_duration_seconds")
                              .Help("Time to read one request's hot-tier misses from RocksDB.")
                              .Register(registry)
                              .Add({}, LatencyBuckets())),
      data_loss_(metrics::BuildCounter()
                     .Name("engram_shard_data_loss_total")
                     .Help("Lookups failed with DATA_LOSS (missing or corrupt "
                           "rows on disk).")
                     .Register(registry)
                     .Add({})),
      inflight_(metrics::BuildGauge()
                    .Name("engram_shard_inflight_requests")
                    .Help("Lookup RPCs being served.")
                    .Register(registry)
                    .Add({})),
      stream_connections_(metrics::BuildGauge()
                              .Name("engram_shard_stream_connections")
                              .Help("Open row stream connections.")
                              .Register(registry)
                              .Add({})),
      hot_pinned_bytes_(metrics::BuildGauge()
                            .Name("engram_shard_hot_tier_bytes")
                            .Help("Row bytes held in RAM by the hot tier.")
                            .Register(registry)
                            .Add({{"part", "pinned"}})),
      hot_cached_bytes_(metrics::BuildGauge()
                            .Name("engram_shard_hot_tier_bytes")
                            .Register(registry)
                            .Add({{"part", "cached"}})),
      table_version_(metrics::BuildGauge()
                         .Name("engram_shard_table_version")
                         .Help("The table version served (EngramAdmin/Activate switches it).")
                         .Register(registry)
                         .Add({})),
      layer_row_bytes_(metrics::BuildGauge()
                           .Name("engram_shard_layer_row_bytes")
                           .Help("Stored bytes per row of each layer served, labelled with the "
                                 "rows' encoding (docs/table-format.md, \"Row encodings\").")
                           .Register(registry)),
      resident_(metrics::BuildGauge()
                    .Name("engram_shard_resident_bytes")
                    .Help("RAM the shard holds, by kind: pinned_rows, cached_rows, hot_index "
                          "(the hot tier's index and bookkeeping), rocksdb_index, and the "
                          "process's process_anonymous and process_file_backed pages.")
                    .Register(registry)),
      ram_budget_(metrics::BuildGauge()
                      .Name("engram_shard_ram_budget_bytes")
                      .Help("The shard's --ram-budget.")
                      .Register(registry)
                      .Add({})),
      registry_(registry) {
  auto& durations = metrics::BuildHistogram()
                        .Name("engram_shard_request_duration_seconds")
                        .Help("RPC latency inside the server, by method.")
                        .Register(registry);
  for (int m = 0; m < kMethods; ++m) {
    request_duration_[m] = &durations.Add({{"method", kMethodNames[m]}}, LatencyBuckets());
  }
  auto& rows = metrics::BuildCounter()
                   .Name("engram_shard_rows_total")
                   .Help("Rows served, by layer and by the tier that held them.")
                   .Register(registry);
  auto& bytes = metrics::BuildCounter()
                    .Name("engram_shard_bytes_total")
                    .Help("Row bytes served, by layer.")
                    .Register(registry);
  layers_.reserve(n_layers);
  for (int layer = 0; layer < n_layers; ++layer) {
    const std::string l = std::to_string(layer);
    layers_.push_back({&rows.Add({{"layer", l}, {"tier", "pinned"}}),
                       &rows.Add({{"layer", l}, {"tier", "cached"}}),
                       &rows.Add({{"layer", l}, {"tier", "disk"}}), &bytes.Add({{"layer", l}})});
  }
}

void ShardMetrics::RecordRequest(Method method, absl::StatusCode code, absl::Duration elapsed) {
  const int m = static_cast<int>(method);
  int c = static_cast<int>(code);
  if (c < 0 || c >= kCodes) c = static_cast<int>(absl::StatusCode::kUnknown);
  std::atomic<metrics::Counter*>& slot = request_series_[m][c];
  metrics::Counter* counter = slot.load(std::memory_order_acquire);
  if (counter == nullptr) {
    // Family::Add is idempotent, so racing first uses agree on the series.
    counter =
        &requests_.Add({{"method", kMethodNames[m]},
                        {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(c))}});
    slot.store(counter, std::memory_order_release);
  }
  counter->Increment();
  request_duration_[m]->Observe(absl::ToDoubleSeconds(elapsed));
}

void ShardMetrics::RecordRows(uint32_t layer, const TierCounts& rows, uint64_t bytes) {
  const LayerSeries& s = layers_[layer];
  if (rows.pinned != 0) s.pinned->Increment(static_cast<double>(rows.pinned));
  if (rows.cached != 0) s.cached->Increment(static_cast<double>(rows.cached));
  if (rows.disk != 0) s.disk->Increment(static_cast<double>(rows.disk));
  if (bytes != 0) s.bytes->Increment(static_cast<double>(bytes));
}

void ShardMetrics::SetHotTierBytes(uint64_t pinned, uint64_t cached) {
  hot_pinned_bytes_.Set(static_cast<double>(pinned));
  hot_cached_bytes_.Set(static_cast<double>(cached));
}

void ShardMetrics::SetLayerEncodings(const std::vector<std::string>& encodings,
                                     const std::vector<uint32_t>& row_bytes) {
  for (metrics::Gauge* g : layer_encodings_) g->Set(0);
  layer_encodings_.clear();
  for (size_t l = 0; l < encodings.size(); ++l) {
    metrics::Gauge& g =
        layer_row_bytes_.Add({{"layer", std::to_string(l)}, {"encoding", encodings[l]}});
    g.Set(static_cast<double>(row_bytes[l]));
    layer_encodings_.push_back(&g);
  }
}

void ShardMetrics::SetResident(const Resident& r, uint64_t budget_bytes) {
  const std::pair<const char*, uint64_t> kinds[] = {{"pinned_rows", r.pinned_rows},
                                                    {"cached_rows", r.cached_rows},
                                                    {"hot_index", r.hot_index},
                                                    {"rocksdb_index", r.rocksdb_index},
                                                    {"process_anonymous", r.process_anon},
                                                    {"process_file_backed", r.process_file}};
  for (const auto& [kind, bytes] : kinds) {
    resident_.Add({{"kind", kind}}).Set(static_cast<double>(bytes));
  }
  ram_budget_.Set(static_cast<double>(budget_bytes));
}

void ShardMetrics::SetStoreStats(const std::vector<std::pair<std::string, double>>& stats) {
  for (const auto& [name, value] : stats) {
    const std::string metric = "engram_shard_" + name;
    if (!metrics::IsValidMetricName(metric)) continue;
    metrics::BuildGauge()
        .Name(metric)
        .Help("RocksDB statistic of the row store, read at scrape time.")
        .Register(registry_)
        .Add({})
        .Set(value);
  }
}

}  // namespace engram

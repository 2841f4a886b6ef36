#include "service/shard_metrics.h"

#include <string>

#include "absl/status/status.h"

namespace engram {
namespace {

constexpr const char* kMethodNames[] = {"Lookup", "Info"};

// 50 us .. ~1.6 s, doubling.
prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  prometheus::Histogram::BucketBoundaries buckets;
  for (double bound = 50e-6; buckets.size() < 16; bound *= 2) buckets.push_back(bound);
  return buckets;
}

}  // namespace

ShardMetrics::ShardMetrics(prometheus::Registry& registry, int n_layers)
    : requests_(prometheus::BuildCounter()
                    .Name("engram_shard_requests_total")
                    .Help("Finished RPCs by method and status code.")
                    .Register(registry)),
      disk_read_duration_(prometheus::BuildHistogram()
                              .Name("engram_shard_disk_read_duration_seconds")
                              .Help("Time to read one request's hot-tier misses from RocksDB.")
                              .Register(registry)
                              .Add({}, LatencyBuckets())),
      data_loss_(prometheus::BuildCounter()
                     .Name("engram_shard_data_loss_total")
                     .Help("Lookups failed with DATA_LOSS (missing or corrupt "
                           "rows on disk).")
                     .Register(registry)
                     .Add({})),
      inflight_(prometheus::BuildGauge()
                    .Name("engram_shard_inflight_requests")
                    .Help("Lookup RPCs being served.")
                    .Register(registry)
                    .Add({})),
      stream_connections_(prometheus::BuildGauge()
                              .Name("engram_shard_stream_connections")
                              .Help("Open row stream connections.")
                              .Register(registry)
                              .Add({})) {
  auto& durations = prometheus::BuildHistogram()
                        .Name("engram_shard_request_duration_seconds")
                        .Help("RPC latency inside the server, by method.")
                        .Register(registry);
  for (int m = 0; m < kMethods; ++m) {
    request_duration_[m] = &durations.Add({{"method", kMethodNames[m]}}, LatencyBuckets());
  }
  auto& rows = prometheus::BuildCounter()
                   .Name("engram_shard_rows_total")
                   .Help("Rows served, by layer and by the tier that held them.")
                   .Register(registry);
  auto& bytes = prometheus::BuildCounter()
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
  std::atomic<prometheus::Counter*>& slot = request_series_[m][c];
  prometheus::Counter* counter = slot.load(std::memory_order_acquire);
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

}  // namespace engram

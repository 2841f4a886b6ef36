// The shard server's Prometheus metrics.
//
//   engram_shard_requests_total{method,code}         counter
//   engram_shard_request_duration_seconds{method}    histogram
//   engram_shard_inflight_requests                   gauge
//   engram_shard_stream_connections                  gauge
//   engram_shard_rows_total{layer,tier}              counter (pinned|cached|disk)
//   engram_shard_bytes_total{layer}                  counter (row bytes served)
//   engram_shard_disk_read_duration_seconds          histogram (one per batch)
//   engram_shard_data_loss_total                     counter
//   engram_shard_hot_tier_bytes{part}                gauge (pinned|cached)
//   engram_shard_table_version                       gauge (the version served)
//   engram_shard_layer_row_bytes{layer,encoding}     gauge (stored bytes per row of
//                                                    the table served; 0 for an encoding
//                                                    no longer served)
//   engram_shard_rocksdb_*                           gauges (RowStore::Stats())
//
// Lookups over the row stream count under method="Lookup" like gRPC's.
//
// Every series the hot path touches is resolved once, up front (per-layer
// arrays; request codes on first use), so recording is a relaxed atomic add
// with no lock and no map lookup. Thread-safe.
#ifndef ENGRAM_SERVICE_SHARD_METRICS_H_
#define ENGRAM_SERVICE_SHARD_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/metrics/counter.h"
#include "common/metrics/family.h"
#include "common/metrics/gauge.h"
#include "common/metrics/histogram.h"
#include "common/metrics/registry.h"

namespace engram {

// Rows of one layer served by one request, by the tier that served them.
struct TierCounts {
  uint64_t pinned = 0;
  uint64_t cached = 0;
  uint64_t disk = 0;
};

class ShardMetrics {
 public:
  enum class Method { kLookup = 0, kInfo = 1 };

  // Registers the families in `registry` (which must outlive this object)
  // with per-layer series for layers 0..n_layers-1.
  ShardMetrics(metrics::Registry& registry, int n_layers);
  ShardMetrics(const ShardMetrics&) = delete;
  ShardMetrics& operator=(const ShardMetrics&) = delete;

  // A finished call: counts it by code and observes its duration.
  void RecordRequest(Method method, absl::StatusCode code, absl::Duration elapsed);
  // Rows and bytes served for `layer`. REQUIRES: layer < n_layers.
  void RecordRows(uint32_t layer, const TierCounts& rows, uint64_t bytes);
  void RecordDiskRead(absl::Duration elapsed) {
    disk_read_duration_.Observe(absl::ToDoubleSeconds(elapsed));
  }
  void RecordDataLoss() { data_loss_.Increment(); }

  metrics::Gauge& inflight() { return inflight_; }
  metrics::Gauge& stream_connections() { return stream_connections_; }

  // Scrape-time values (call from a Registry collect callback).
  void SetHotTierBytes(uint64_t pinned, uint64_t cached);
  // What the shard holds in RAM, by kind, and the budget it was given
  // (engram_shard_resident_bytes{kind}, engram_shard_ram_budget_bytes).
  struct Resident {
    uint64_t pinned_rows = 0;    // hot tier rows pinned from the profile
    uint64_t cached_rows = 0;    // hot tier rows in the admission cache
    uint64_t hot_index = 0;      // their index, checksums and bookkeeping
    uint64_t rocksdb_index = 0;  // RocksDB's table readers (index blocks)
    uint64_t process_anon = 0;   // the whole process: anonymous memory (RssAnon)
    uint64_t process_file = 0;   // the whole process: file pages mapped (RssFile)
  };
  void SetResident(const Resident& resident, uint64_t budget_bytes);
  void SetTableVersion(uint64_t version) { table_version_.Set(static_cast<double>(version)); }
  // Each layer's row encoding (common/row_encoding.h name) and stored row
  // bytes, for the table now served. REQUIRES: one entry per layer.
  void SetLayerEncodings(const std::vector<std::string>& encodings,
                         const std::vector<uint32_t>& row_bytes);
  // Each stat `rocksdb_x` becomes gauge engram_shard_rocksdb_x; names that
  // are not valid metric names are skipped.
  void SetStoreStats(const std::vector<std::pair<std::string, double>>& stats);

 private:
  static constexpr int kMethods = 2;
  static constexpr int kCodes = 17;  // grpc/absl status codes 0..16

  struct LayerSeries {
    metrics::Counter* pinned;
    metrics::Counter* cached;
    metrics::Counter* disk;
    metrics::Counter* bytes;
  };

  metrics::Family<metrics::Counter>& requests_;
  // requests_ series, created on a code's first use.
  std::array<std::array<std::atomic<metrics::Counter*>, kCodes>, kMethods> request_series_{};
  std::array<metrics::Histogram*, kMethods> request_duration_{};
  std::vector<LayerSeries> layers_;
  metrics::Histogram& disk_read_duration_;
  metrics::Counter& data_loss_;
  metrics::Gauge& inflight_;
  metrics::Gauge& stream_connections_;
  metrics::Gauge& hot_pinned_bytes_;
  metrics::Gauge& hot_cached_bytes_;
  metrics::Gauge& table_version_;
  metrics::Family<metrics::Gauge>& layer_row_bytes_;
  std::vector<metrics::Gauge*> layer_encodings_;  // the series now set
  metrics::Family<metrics::Gauge>& resident_;
  metrics::Gauge& ram_budget_;
  metrics::Registry& registry_;  // for the RocksDB gauges, made at scrape
};

}  // namespace engram

#endif  // ENGRAM_SERVICE_SHARD_METRICS_H_

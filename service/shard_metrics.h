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
//
// The series read at scrape time (hot tier, resident bytes, table version,
// layer encodings, RocksDB statistics) are ShardCollectable's
// (service/shard_collectable.h).
//
// Lookups over the row stream count under method="Lookup" like gRPC's.
//
// Every series the hot path touches is resolved once, up front (per-layer
// arrays; request codes on first use), so recording takes no map lookup:
// a counter is an atomic add (prometheus-cpp: compare-and-swap on a double),
// a histogram observation a short critical section of its own. Thread-safe.
#ifndef ENGRAM_SERVICE_SHARD_METRICS_H_
#define ENGRAM_SERVICE_SHARD_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

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
  // with per-layer series for layers 0..n_layers-1. The names and labels
  // are fixed and valid, so prometheus-cpp does not throw.
  ShardMetrics(prometheus::Registry& registry, int n_layers);
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

  prometheus::Gauge& inflight() { return inflight_; }
  prometheus::Gauge& stream_connections() { return stream_connections_; }

 private:
  static constexpr int kMethods = 2;
  static constexpr int kCodes = 17;  // grpc/absl status codes 0..16

  struct LayerSeries {
    prometheus::Counter* pinned;
    prometheus::Counter* cached;
    prometheus::Counter* disk;
    prometheus::Counter* bytes;
  };

  prometheus::Family<prometheus::Counter>& requests_;
  // requests_ series, created on a code's first use.
  std::array<std::array<std::atomic<prometheus::Counter*>, kCodes>, kMethods> request_series_{};
  std::array<prometheus::Histogram*, kMethods> request_duration_{};
  std::vector<LayerSeries> layers_;
  prometheus::Histogram& disk_read_duration_;
  prometheus::Counter& data_loss_;
  prometheus::Gauge& inflight_;
  prometheus::Gauge& stream_connections_;
};

}  // namespace engram

#endif  // ENGRAM_SERVICE_SHARD_METRICS_H_

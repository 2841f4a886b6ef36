// ShardCollectable: the shard's series whose values are read when /metrics
// is scraped, built as MetricFamily lists by Collect(). ShardServer
// registers it with the exposer beside the registry of ShardMetrics.
//
//   engram_shard_hot_tier_bytes{part}               gauge (pinned|cached)
//   engram_shard_resident_bytes{kind}               gauge (what the shard holds in RAM)
//   engram_shard_ram_budget_bytes                   gauge (--ram-budget)
//   engram_shard_table_version                      gauge (the version served)
//   engram_shard_layer_row_bytes{layer,encoding}    gauge (stored bytes per row of
//                                                   the table served; 0 for an
//                                                   encoding no longer served)
//   engram_shard_<stat>                             gauge per RowStore/HotTier
//                                                   statistic (rocksdb_*, scrub_*, ...)
//
// Threading: Collect() runs on the exposer's threads, SetTable() on the
// caller's (start, Activate); both are thread-safe. The source given to the
// constructor is called by Collect() and must be thread-safe too.
#ifndef ENGRAM_SERVICE_SHARD_COLLECTABLE_H_
#define ENGRAM_SERVICE_SHARD_COLLECTABLE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace engram {

class ShardCollectable : public prometheus::Collectable {
 public:
  // What the shard holds in RAM, by kind (engram_shard_resident_bytes{kind}).
  struct Resident {
    uint64_t pinned_rows = 0;    // hot tier rows pinned from the profile
    uint64_t cached_rows = 0;    // hot tier rows in the admission cache
    uint64_t hot_index = 0;      // their index, checksums and bookkeeping
    uint64_t rocksdb_index = 0;  // RocksDB's table readers (index blocks)
    uint64_t process_anon = 0;   // the whole process: anonymous memory (RssAnon)
    uint64_t process_file = 0;   // the whole process: file pages mapped (RssFile)
  };
  // The values read at one scrape.
  struct Snapshot {
    uint64_t hot_pinned_bytes = 0;
    uint64_t hot_cached_bytes = 0;
    Resident resident;
    // Each stat `x` becomes gauge engram_shard_x; names that are not valid
    // metric names are skipped.
    std::vector<std::pair<std::string, double>> stats;
  };
  // Called at each scrape.
  using Source = std::function<Snapshot()>;

  ShardCollectable(uint64_t ram_budget_bytes, Source source);

  // The table now served: its version and each layer's row encoding
  // (common/codec/row_encoding.h name) and stored row bytes. REQUIRES: one
  // encoding per row_bytes entry.
  void SetTable(uint64_t version, const std::vector<std::string>& encodings,
                const std::vector<uint32_t>& row_bytes);

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const uint64_t ram_budget_bytes_;
  const Source source_;
  mutable absl::Mutex mu_;
  uint64_t table_version_ ABSL_GUARDED_BY(mu_) = 0;
  // Every (layer, encoding) served since start, with its row bytes (0 once
  // no longer served).
  std::map<std::pair<uint32_t, std::string>, uint32_t> layer_row_bytes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace engram

#endif  // ENGRAM_SERVICE_SHARD_COLLECTABLE_H_

// engram-bench-metrics: what the shard's Prometheus metrics cost
// (docs/benchmarks.md, "Shard server"): (a) the metric updates one Lookup
// makes on the hot path, and (b) a scrape: collecting and serialising the
// /metrics page of a shard with all its series.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "service/shard_collectable.h"
#include "service/shard_metrics.h"

namespace engram {
namespace {

constexpr int kLayers = 2;  // DeepSeek-V4.1: two Engram layers

// The statistics a shard's RowStore and HotTier report (shard/), with
// representative values.
std::vector<std::pair<std::string, double>> StoreStats() {
  std::vector<std::pair<std::string, double>> stats;
  for (const char* name : {"rocksdb_index_memory_bytes",
                           "rocksdb_sst_bytes",
                           "rocksdb_keys",
                           "damaged_rows",
                           "expired_rows",
                           "late_rows",
                           "unreadable_pages",
                           "rocksdb_multiget_calls",
                           "rocksdb_multiget_keys",
                           "rocksdb_multiget_bytes",
                           "rocksdb_file_reads",
                           "rocksdb_file_read_bytes",
                           "rocksdb_block_checksums",
                           "rocksdb_block_cache_hits",
                           "scrub_pinned_rows",
                           "scrub_pinned_failures",
                           "scrub_pinned_repaired",
                           "scrub_pinned_passes",
                           "scrub_disk_rows",
                           "scrub_disk_failures",
                           "scrub_layer_mismatches",
                           "scrub_disk_passes",
                           "hot_damaged_at_load",
                           "hot_quarantined_rows"}) {
    stats.emplace_back(name, 123456789.0);
  }
  return stats;
}

// A shard's metrics with every series a busy shard has: its registry and
// its scrape-time collectable, as ShardServer registers them.
struct Shard {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  ShardMetrics metrics{*registry, kLayers};
  ShardCollectable scrape{uint64_t{4} << 30, [] {
                            ShardCollectable::Snapshot now;
                            now.hot_pinned_bytes = 1u << 30;
                            now.hot_cached_bytes = 1u << 28;
                            now.resident = {1u << 30, 1u << 28, 1u << 26,
                                            1u << 25, 1u << 31, 1u << 24};
                            now.stats = StoreStats();
                            return now;
                          }};

  Shard() {
    scrape.SetTable(3, {"e4m3_e8m0", "e4m3_e8m0"}, {264, 264});
    for (int code = 0; code <= 16; ++code) {
      metrics.RecordRequest(ShardMetrics::Method::kLookup, static_cast<absl::StatusCode>(code),
                            absl::Microseconds(200));
    }
    metrics.RecordRequest(ShardMetrics::Method::kInfo, absl::StatusCode::kOk,
                          absl::Microseconds(20));
    metrics.RecordDiskRead(absl::Microseconds(90));
    metrics.RecordDataLoss();
  }

  // What the exposer does at a scrape: collect both, serialise.
  std::string Page() const {
    std::vector<prometheus::MetricFamily> families = registry->Collect();
    for (prometheus::MetricFamily& f : scrape.Collect()) families.push_back(std::move(f));
    return prometheus::TextSerializer().Serialize(families);
  }
};

// (a) One Lookup's updates: in flight, rows and bytes of each layer, the
// request's code and latency.
void BM_LookupMetricUpdates(benchmark::State& state) {
  static Shard* shard = new Shard();
  ShardMetrics& m = shard->metrics;
  const TierCounts rows{12, 3, 1};
  for (auto _ : state) {
    m.inflight().Increment();
    for (uint32_t layer = 0; layer < kLayers; ++layer) m.RecordRows(layer, rows, 16 * 264);
    m.RecordRequest(ShardMetrics::Method::kLookup, absl::StatusCode::kOk, absl::Microseconds(180));
    m.inflight().Decrement();
  }
}
BENCHMARK(BM_LookupMetricUpdates)->Threads(1)->Threads(2);

// (b) A scrape of the whole page: scrape-time values read, families
// collected, text serialised.
void BM_ScrapeShardPage(benchmark::State& state) {
  Shard shard;
  size_t bytes = 0;
  for (auto _ : state) {
    std::string page = shard.Page();
    bytes = page.size();
    benchmark::DoNotOptimize(page);
  }
  state.counters["page_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_ScrapeShardPage);

}  // namespace
}  // namespace engram

BENCHMARK_MAIN();

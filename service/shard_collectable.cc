#include "service/shard_collectable.h"

#include <set>
#include <string>
#include <utility>

#include "prometheus/check_names.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_type.h"

namespace engram {
namespace {

using Labels = std::vector<prometheus::ClientMetric::Label>;

prometheus::MetricFamily GaugeFamily(std::string name, std::string help) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = prometheus::MetricType::Gauge;
  return family;
}

void AddSample(prometheus::MetricFamily& family, Labels labels, double value) {
  prometheus::ClientMetric& m = family.metric.emplace_back();
  m.label = std::move(labels);
  m.gauge.value = value;
}

}  // namespace

ShardCollectable::ShardCollectable(uint64_t ram_budget_bytes, Source source)
    : ram_budget_bytes_(ram_budget_bytes), source_(std::move(source)) {}

void ShardCollectable::SetTable(uint64_t version, const std::vector<std::string>& encodings,
                                const std::vector<uint32_t>& row_bytes) {
  absl::MutexLock lock(&mu_);
  table_version_ = version;
  for (auto& [key, bytes] : layer_row_bytes_) bytes = 0;
  for (size_t l = 0; l < encodings.size(); ++l) {
    layer_row_bytes_[{static_cast<uint32_t>(l), encodings[l]}] = row_bytes[l];
  }
}

std::vector<prometheus::MetricFamily> ShardCollectable::Collect() const {
  std::vector<prometheus::MetricFamily> out;
  {
    absl::MutexLock lock(&mu_);
    prometheus::MetricFamily& version = out.emplace_back(
        GaugeFamily("engram_shard_table_version",
                    "The table version served (EngramAdmin/Activate switches it)."));
    AddSample(version, {}, static_cast<double>(table_version_));
    prometheus::MetricFamily& layers = out.emplace_back(
        GaugeFamily("engram_shard_layer_row_bytes",
                    "Stored bytes per row of each layer served, labelled with the rows' encoding "
                    "(docs/table-format.md, \"Row encodings\")."));
    for (const auto& [key, bytes] : layer_row_bytes_) {
      AddSample(layers, {{"encoding", key.second}, {"layer", std::to_string(key.first)}},
                static_cast<double>(bytes));
    }
  }
  prometheus::MetricFamily& budget =
      out.emplace_back(GaugeFamily("engram_shard_ram_budget_bytes", "The shard's --ram-budget."));
  AddSample(budget, {}, static_cast<double>(ram_budget_bytes_));

  const Snapshot now = source_();
  prometheus::MetricFamily& hot = out.emplace_back(
      GaugeFamily("engram_shard_hot_tier_bytes", "Row bytes held in RAM by the hot tier."));
  AddSample(hot, {{"part", "cached"}}, static_cast<double>(now.hot_cached_bytes));
  AddSample(hot, {{"part", "pinned"}}, static_cast<double>(now.hot_pinned_bytes));

  prometheus::MetricFamily& resident = out.emplace_back(GaugeFamily(
      "engram_shard_resident_bytes",
      "RAM the shard holds, by kind: pinned_rows, cached_rows, hot_index (the hot tier's index "
      "and bookkeeping), rocksdb_index, and the process's process_anonymous and "
      "process_file_backed pages."));
  const Resident& r = now.resident;
  const std::pair<const char*, uint64_t> kinds[] = {
      {"cached_rows", r.cached_rows},          {"hot_index", r.hot_index},
      {"pinned_rows", r.pinned_rows},          {"process_anonymous", r.process_anon},
      {"process_file_backed", r.process_file}, {"rocksdb_index", r.rocksdb_index}};
  for (const auto& [kind, bytes] : kinds) {
    AddSample(resident, {{"kind", kind}}, static_cast<double>(bytes));
  }

  std::set<std::string> seen;  // a name twice would be two families: the first wins
  for (const auto& [stat, value] : now.stats) {
    std::string name = "engram_shard_" + stat;
    if (!prometheus::CheckMetricName(name) || !seen.insert(name).second) continue;
    AddSample(out.emplace_back(GaugeFamily(
                  std::move(name), "RocksDB statistic of the row store, read at scrape time.")),
              {}, value);
  }
  return out;
}

}  // namespace engram

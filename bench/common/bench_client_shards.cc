#include "bench/common/bench_client_shards.h"

#include <cstddef>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/common/proc_stat.h"
#include "common/format/shard_map.h"
#include "common/net/prometheus_scrape.h"
#include "common/util/status_macros.h"
#include "shard/footprint.h"

namespace engram::bench {

absl::StatusOr<std::unique_ptr<Deployment>> Deployment::Start(const Options& o) {
  std::unique_ptr<Deployment> d(new Deployment());
  for (size_t i = 0; i < o.shard_dirs.size(); ++i) {
    const std::string& dir = o.shard_dirs[i];
    ASSIGN_OR_RETURN(ShardFootprint f, MeasureShardFootprint(dir, o.direct_io));
    const uint64_t budget = o.hot_share <= 0 ? 0 : f.share_budget(o.hot_share);
    testing::ShardProcess::Options po;
    po.binary = o.binary;
    po.db_dir = dir;
    po.flags = {"--ram-budget", absl::StrCat(budget), "--drain-timeout", "2s"};
    if (o.reader_threads > 0) {
      po.flags.insert(po.flags.end(), {"--reader-threads", absl::StrCat(o.reader_threads)});
    }
    if (!o.direct_io) po.flags.push_back("--direct-io=false");
    if (o.hot_cache_share.has_value()) {
      po.flags.insert(po.flags.end(), {"--hot-cache-share", absl::StrCat(*o.hot_cache_share)});
    }
    if (o.worker_cache_bytes > 0) {
      po.flags.insert(po.flags.end(), {"--worker-cache-bytes", absl::StrCat(o.worker_cache_bytes)});
    }
    po.flags.insert(po.flags.end(), o.extra_flags.begin(), o.extra_flags.end());
    po.stderr_path = absl::StrCat(o.log_dir, "/shard-", i, "-of-", o.shard_dirs.size(), ".err");
    if (i < o.cgroups.size() && o.cgroups[i] != nullptr) {
      po.cgroup_procs_fd = o.cgroups[i]->procs_fd();
    }
    ASSIGN_OR_RETURN(std::unique_ptr<testing::ShardProcess> p, testing::ShardProcess::Start(po));
    d->shards_.push_back(std::move(p));
    d->hot_profiles_.push_back(absl::StrCat(dir, "/", kHotProfileFile));
    d->hot_bytes_ += budget;
    d->footprints_.push_back(f);
  }
  if (!o.shard_dirs.empty()) d->shard_map_path_ = o.shard_dirs[0] + "/shard_map.json";
  return d;
}

std::vector<std::string> Deployment::addresses() const {
  std::vector<std::string> out;
  for (const auto& s : shards_) out.push_back(s->address());
  return out;
}

std::vector<pid_t> Deployment::pids() const {
  std::vector<pid_t> out;
  for (const auto& s : shards_) out.push_back(s->pid());
  return out;
}

std::vector<int> Deployment::metrics_ports() const {
  std::vector<int> out;
  for (const auto& s : shards_) out.push_back(s->metrics_port());
  return out;
}

std::vector<int> Deployment::stream_ports() const {
  std::vector<int> out;
  for (const auto& s : shards_) {
    if (s->stream_port() > 0) out.push_back(s->stream_port());
  }
  return out;
}

double Deployment::cpu_seconds() const {
  double sum = 0;
  for (const auto& s : shards_) sum += ProcessCpuSeconds(s->pid());
  return sum;
}

absl::StatusOr<std::vector<Deployment::ShardCounters>> Deployment::Counters() const {
  std::vector<ShardCounters> out;
  for (const auto& s : shards_) {
    ASSIGN_OR_RETURN(scrape::HttpResponse r, scrape::HttpGet(s->metrics_port(), "/metrics"));
    const std::vector<scrape::Sample> samples = scrape::ParseSamples(r.body);
    ShardCounters c;
    c.rows.pinned = scrape::SumSamples(samples, "engram_shard_rows_total", {{"tier", "pinned"}});
    c.rows.cached = scrape::SumSamples(samples, "engram_shard_rows_total", {{"tier", "cached"}});
    c.rows.disk = scrape::SumSamples(samples, "engram_shard_rows_total", {{"tier", "disk"}});
    for (const scrape::Sample& sample : samples) {
      if (sample.name != "engram_shard_rows_total") continue;
      const auto layer = sample.labels.find("layer");
      const auto tier = sample.labels.find("tier");
      size_t l;
      if (layer == sample.labels.end() || tier == sample.labels.end() ||
          !absl::SimpleAtoi(layer->second, &l) || l >= 4096) {
        continue;
      }
      if (c.layers.size() <= l) c.layers.resize(l + 1);
      TierRows& t = c.layers[l];
      if (tier->second == "pinned") t.pinned += sample.value;
      if (tier->second == "cached") t.cached += sample.value;
      if (tier->second == "disk") t.disk += sample.value;
    }
    c.file_reads = scrape::SumSamples(samples, "engram_shard_rocksdb_file_reads", {});
    out.push_back(c);
  }
  return out;
}

absl::StatusOr<TierRows> Deployment::Tiers() const {
  ASSIGN_OR_RETURN(std::vector<ShardCounters> shards, Counters());
  TierRows t;
  for (const ShardCounters& c : shards) {
    t.pinned += c.rows.pinned;
    t.cached += c.rows.cached;
    t.disk += c.rows.disk;
  }
  return t;
}

}  // namespace engram::bench

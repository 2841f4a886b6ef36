#include "bench/client/bench_tiers.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/common/bench_client_shards.h"
#include "bench/common/cgroup.h"
#include "bench/common/raw_disk.h"
#include "common/util/status_macros.h"
#include "shard/footprint.h"
#include "shard/plan/placement.h"
#include "shard/plan/tier_plan.h"
#include "shard/plan/tier_replay.h"
#include "shard/shard_format.h"

namespace engram::bench {
namespace {

namespace fs = std::filesystem;

// One shard of one run.
struct ShardRun {
  uint64_t budget = 0, cap = 0, peak = 0, limit_hits = 0;
  uint64_t anon = 0, file = 0;  // charged at the end of the run
  double hit_ratio = 0, tail_rows_per_s = 0, reads_per_s = 0, predicted_hit_ratio = 0;
  double rpc_ms = 0;  // mean Lookup time the client saw
};

// What the planner says of one placement at one budget and block time.
struct Prediction {
  TierPlacement placement;
  BudgetReplay replay;     // the placement's replay (hit ratios, tail rows)
  double exposed_pct = 0;  // the planner's model
  double bound_pct = 0;    // IdealExposedWaitPercent
};

// One budget, policy and block time.
struct Run {
  double pct = 0;
  PlacementPolicy policy = PlacementPolicy::kFrequency;
  absl::Duration block;
  Prediction predicted;
  InferenceLoopResult loop;
  std::vector<ShardRun> shards;
  std::vector<TierRows> layers;  // all shards, per Engram layer
  double hit_ratio = 0, tail_rows_per_s = 0, reads_per_s = 0;
  double raw_reads_per_s = 0;
  std::vector<double> fetch_p50, fetch_p99;  // per layer, ms
};

// The machine as this run measured it: the disk's rate at the shards'
// depth and its latency at depth 1, and the request path without the disk
// (CalibratePath); the tail read as fitted (CalibrateTail), its rate a
// share of the raw one so that it follows the rate measured per budget.
struct Disk {
  double reads_per_s = 0;
  double latency_us = 0;
  double path_us = PlanModelOptions{}.rtt_us;
  double read_latency_us = 0;  // 0: latency_us
  double read_rate_share = 0;  // of reads_per_s / shards; 0: 1
};

// The tokens the loop decodes, as the replay reads them: line b holds
// sequence b's tokens 0 .. steps-1 (InferenceLoop without prefill).
absl::Status WriteLoopTrace(const TokenTrace& trace, int batch, int steps,
                            const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  for (int b = 0; b < batch; ++b) {
    for (int t = 0; t < steps; ++t) {
      out << trace.Token(b, batch, static_cast<size_t>(t)) << (t + 1 < steps ? ' ' : '\n');
    }
  }
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

std::vector<std::string> SstFiles(const std::vector<std::string>& dirs) {
  std::vector<std::string> files;
  for (const std::string& d : dirs) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d + "/rocksdb", ec)) {
      if (e.path().extension() == ".sst") files.push_back(e.path().string());
    }
  }
  return files;
}

// The planner's model of this machine: each shard a third of the one disk,
// its tail read as calibrated; a request's path (send, the shards' work,
// the reply) as calibrated, its rows' transfer included (so no link limit
// of its own); the client's fetch order (pipeline_layers: sequential).
PlanModelOptions Model(const TiersOptions& o, const Disk& disk, absl::Duration block) {
  PlanModelOptions m;
  m.disk_iops = disk.reads_per_s / o.shards * (disk.read_rate_share > 0 ? disk.read_rate_share : 1);
  m.disk_latency_us = disk.read_latency_us > 0 ? disk.read_latency_us : disk.latency_us;
  m.rtt_us = disk.path_us;
  m.network_gbps = 1e6;
  m.block_us = absl::ToDoubleMicroseconds(block);
  m.blocks = o.blocks;
  m.fetch_order = FetchOrder::kSequential;
  return m;
}

absl::StatusOr<Prediction> Predict(const TiersOptions& o, const TierReplay& replay, uint64_t budget,
                                   PlacementPolicy policy, const Disk& disk, absl::Duration block) {
  const PlanModelOptions model = Model(o, disk, block);
  ASSIGN_OR_RETURN(PlacementChoice choice, PlanPlacement(replay, budget, policy, model));
  Prediction p;
  p.placement = choice.placement;
  p.exposed_pct = choice.plan.exposed_wait_percent;
  ASSIGN_OR_RETURN(p.replay, replay.Run(budget, p.placement));
  // The bound is the device's: its raw rate and depth-1 latency.
  p.bound_pct = IdealExposedWaitPercent(replay, p.replay, disk.reads_per_s / o.shards,
                                        disk.latency_us, model.block_us, model.blocks);
  return p;
}

// Puts the placement into every shard directory's tier_plan.json (the
// default policy, with the server's default cache share: none at all).
absl::Status WriteTierPlans(const std::vector<std::string>& dirs, const TierPlacement& p) {
  for (const std::string& d : dirs) {
    const std::string path = d + "/" + kTierPlanFile;
    std::error_code ec;
    fs::remove(path, ec);
    if (p.layer_pin_shares.empty() && p.cache_share_percent == kHotTierCacheSharePercent) continue;
    const TierPlanFile f = TierPlanOf(p);
    RETURN_IF_ERROR(f.Save(path));
  }
  return absl::OkStatus();
}

// Removes the tier plans the runs wrote, however RunTableOverRam ends.
class TierPlanCleanup {
 public:
  explicit TierPlanCleanup(const std::vector<std::string>& dirs) : dirs_(dirs) {}
  ~TierPlanCleanup() { WriteTierPlans(dirs_, TierPlacement{}).IgnoreError(); }

 private:
  const std::vector<std::string>& dirs_;
};

absl::StatusOr<Run> RunOne(const TiersOptions& o, const std::vector<std::string>& dirs,
                           const std::vector<ShardFootprint>& footprints, double pct,
                           PlacementPolicy policy, absl::Duration block, Prediction predicted) {
  Run run;
  run.pct = pct;
  run.policy = policy;
  run.block = block;
  run.predicted = std::move(predicted);
  RETURN_IF_ERROR(WriteTierPlans(dirs, run.predicted.placement));
  std::vector<std::unique_ptr<MemoryCgroup>> groups;
  Deployment::Options d;
  d.binary = o.shard_binary;
  d.shard_dirs = dirs;
  d.hot_share = pct / 100.0;
  d.direct_io = true;
  d.reader_threads = o.reader_threads;
  d.log_dir = o.log_dir;
  for (size_t i = 0; i < dirs.size(); ++i) {
    ShardRun s;
    s.budget = footprints[i].share_budget(pct / 100);
    s.cap = s.budget + o.overhead_bytes;
    run.shards.push_back(s);
    ASSIGN_OR_RETURN(
        std::unique_ptr<MemoryCgroup> g,
        MemoryCgroup::Create(absl::StrCat("engram-bench-tiers-", ::getpid(), "-", i), s.cap));
    d.cgroups.push_back(g.get());
    groups.push_back(std::move(g));
  }
  {
    ASSIGN_OR_RETURN(std::unique_ptr<Deployment> dep, Deployment::Start(d));
    ClientOptions co;
    co.table_dir = o.workload.table_dir;
    co.shard_map_path = dep->shard_map_path();
    for (const std::string& a : dep->addresses()) co.shard_addresses.push_back({a});
    // The library's default: a layer is sent once the one before it has
    // arrived, each with its need-by. Sending every layer at Prefetch
    // starts the later layer's tail reads sooner, but their CPU on the
    // shards and the client then delays the first layer, which has one
    // block (docs/benchmarks.md, "Tables larger than RAM").
    co.pipeline_layers = true;
    co.block_time = block;
    // A disk that stalls for seconds (this VM's does, now and then) is
    // exposed wait to measure, not a run to abort at the default 2 s RPC
    // deadline.
    co.rpc_deadline = absl::Seconds(30);
    co.step_deadline = absl::Seconds(60);
    ASSIGN_OR_RETURN(std::unique_ptr<EngramClient> client, EngramClient::Create(co));
    ASSIGN_OR_RETURN(std::vector<Deployment::ShardCounters> before, dep->Counters());
    InferenceLoopOptions lo;
    lo.trace = o.trace;
    lo.batch = o.batch;
    lo.prefill = 0;
    lo.decode_steps = o.decode_steps;
    lo.blocks = o.blocks;
    lo.block_time = block;
    lo.format = o.format;
    lo.realtime = o.realtime;
    lo.verify_per_layer = 16;
    lo.verify_table = o.table;
    lo.measure_skew = false;
    lo.max_run_time = absl::Minutes(5);
    ASSIGN_OR_RETURN(run.loop, RunInferenceLoop(*client, lo));
    if (run.loop.decode_steps != o.decode_steps) {
      return absl::DeadlineExceededError(
          absl::StrCat("the run at ", pct, "% and ", absl::FormatDuration(block), " decoded only ",
                       run.loop.decode_steps, " of ", o.decode_steps, " steps in 5 minutes"));
    }
    if (run.loop.wrong != 0) {
      return absl::DataLossError(absl::StrCat(run.loop.wrong, " rows differed from the table"));
    }
    ASSIGN_OR_RETURN(std::vector<Deployment::ShardCounters> after, dep->Counters());
    for (size_t i = 0; i < groups.size(); ++i) {
      run.shards[i].anon = groups[i]->anon_bytes();
      run.shards[i].file = groups[i]->file_bytes();
    }
    const double secs = std::max(1e-9, run.loop.run_seconds);
    const ClientStats& cs = run.loop.client;
    TierRows all;
    for (size_t i = 0; i < dirs.size(); ++i) {
      ShardRun& s = run.shards[i];
      TierRows r;
      r.pinned = after[i].rows.pinned - before[i].rows.pinned;
      r.cached = after[i].rows.cached - before[i].rows.cached;
      r.disk = after[i].rows.disk - before[i].rows.disk;
      all.pinned += r.pinned;
      all.cached += r.cached;
      all.disk += r.disk;
      for (size_t l = 0; l < after[i].layers.size(); ++l) {
        if (run.layers.size() <= l) run.layers.resize(l + 1);
        const TierRows& a = after[i].layers[l];
        const TierRows b = l < before[i].layers.size() ? before[i].layers[l] : TierRows{};
        run.layers[l].pinned += a.pinned - b.pinned;
        run.layers[l].cached += a.cached - b.cached;
        run.layers[l].disk += a.disk - b.disk;
      }
      s.hit_ratio = r.hot_pct() / 100;
      s.tail_rows_per_s = r.disk / secs;
      s.reads_per_s = (after[i].file_reads - before[i].file_reads) / secs;
      s.predicted_hit_ratio = run.predicted.replay.shards[i].hit_ratio();
      if (i < cs.shard_rpcs.size() && cs.shard_rpcs[i] > 0) {
        s.rpc_ms = 1e3 * cs.shard_latency_sum_seconds[i] / static_cast<double>(cs.shard_rpcs[i]);
      }
      run.tail_rows_per_s += s.tail_rows_per_s;
      run.reads_per_s += s.reads_per_s;
    }
    run.hit_ratio = all.hot_pct() / 100;
  }  // the shards stop here, before their groups go
  for (size_t i = 0; i < groups.size(); ++i) {
    run.shards[i].peak = groups[i]->peak_bytes();
    run.shards[i].limit_hits = groups[i]->limit_hits();
  }
  for (const std::vector<double>& ms : run.loop.layer_fetch_ms) {
    run.fetch_p50.push_back(Percentile(ms, 0.5));
    run.fetch_p99.push_back(Percentile(ms, 0.99));
  }
  return run;
}

std::string Placement(const TierPlacement& p) {
  std::string s = absl::StrCat("cache ", p.cache_share_percent, "%");
  if (p.layer_pin_shares.empty()) return absl::StrCat(s, ", by frequency");
  absl::StrAppend(&s, ", pinned");
  for (size_t l = 0; l < p.layer_pin_shares.size(); ++l) {
    absl::StrAppend(&s, l == 0 ? " " : "/", absl::StrFormat("%.0f", 100 * p.layer_pin_shares[l]));
  }
  return absl::StrCat(s, "%");
}

void PrintRuns(const TiersOptions& o, const std::vector<Run>& runs) {
  std::printf(
      "\nper budget, policy and block time (hit = rows served from RAM; exposed = time blocked, "
      "%% of decode step time: measured, the bound (each layer's tail at the disk's full rate "
      "in deadline order from Prefetch) and the planner's prediction; reads = SST reads/s of "
      "all shards, raw = O_DIRECT 4 KiB reads/s at the same depth)\n");
  std::printf("%7s %9s %6s %8s %8s %8s %8s %8s %10s %10s %17s %17s  %s\n", "budget", "policy",
              "us/blk", "hit", "pred hit", "exposed", "bound", "pred", "reads/s", "raw/s",
              "fetch L0 p50/p99", "fetch L1 p50/p99", "placement");
  for (const Run& r : runs) {
    std::string fetch[2];
    for (size_t l = 0; l < 2 && l < r.fetch_p50.size(); ++l) {
      fetch[l] = absl::StrFormat("%.2f/%.2f ms", r.fetch_p50[l], r.fetch_p99[l]);
    }
    std::printf(
        "%6.0f%% %9s %6.0f %8.4f %8.4f %7.2f%% %7.2f%% %7.2f%% %10.0f %10.0f %17s %17s  %s\n",
        r.pct, PlacementPolicyName(r.policy), absl::ToDoubleMicroseconds(r.block), r.hit_ratio,
        r.predicted.replay.hit_ratio(), r.loop.exposed_wait_pct, r.predicted.bound_pct,
        r.predicted.exposed_pct, r.reads_per_s, r.raw_reads_per_s, fetch[0].c_str(),
        fetch[1].c_str(), Placement(r.predicted.placement).c_str());
  }
  std::printf(
      "\nper Engram layer (all shards: hit = rows served from RAM, tail/s = rows read from disk "
      "per second, exposed = time blocked at that layer, %% of decode step time)\n");
  std::printf("%7s %9s %6s %6s %8s %10s %8s\n", "budget", "policy", "us/blk", "layer", "hit",
              "tail/s", "exposed");
  for (const Run& r : runs) {
    const double secs = std::max(1e-9, r.loop.run_seconds);
    for (size_t l = 0; l < r.layers.size(); ++l) {
      std::printf("%6.0f%% %9s %6.0f %6zu %7.2f%% %10.0f %7.2f%%\n", r.pct,
                  PlacementPolicyName(r.policy), absl::ToDoubleMicroseconds(r.block), l,
                  r.layers[l].hot_pct(), r.layers[l].disk / secs,
                  l < r.loop.layer_exposed_wait_pct.size() ? r.loop.layer_exposed_wait_pct[l] : 0);
    }
  }
  std::printf(
      "\nper shard (budget = --ram-budget; cap = its memory cgroup's limit, budget + %llu MiB; "
      "peak = the group's most charged; anon/file = its anonymous and page-cache bytes at the "
      "run's end; limit hits = times the group reached its limit, each met by reclaim)\n",
      static_cast<unsigned long long>(o.overhead_bytes >> 20));
  std::printf("%7s %9s %6s %5s %10s %10s %10s %8s %8s %6s %8s %8s %10s %10s %8s\n", "budget",
              "policy", "us/blk", "shard", "budget MB", "cap MB", "peak MB", "anon MB", "file MB",
              "hits", "hit", "pred hit", "tail/s", "reads/s", "rpc ms");
  for (const Run& r : runs) {
    for (size_t i = 0; i < r.shards.size(); ++i) {
      const ShardRun& s = r.shards[i];
      std::printf(
          "%6.0f%% %9s %6.0f %5zu %10.1f %10.1f %10.1f %8.1f %8.1f %6llu %8.4f %8.4f %10.0f "
          "%10.0f %8.2f\n",
          r.pct, PlacementPolicyName(r.policy), absl::ToDoubleMicroseconds(r.block), i,
          s.budget / 1e6, s.cap / 1e6, s.peak / 1e6, s.anon / 1e6, s.file / 1e6,
          static_cast<unsigned long long>(s.limit_hits), s.hit_ratio, s.predicted_hit_ratio,
          s.tail_rows_per_s, s.reads_per_s, s.rpc_ms);
    }
  }
}

// The disk's rate at the shards' combined depth and its latency at depth 1,
// each the better of two passes: a single pass can land on a moment the
// device is slow for reasons of its own (on this kind of VM, an eighth of
// the rate of the passes around it), and the bound and the planner's model
// would then describe another disk.
absl::StatusOr<Disk> MeasureDisk(const TiersOptions& o, const std::vector<std::string>& files) {
  // Dirty pages (the tables and shards a first run has just written) are
  // written back first: their writeback would share the disk with the
  // measurement.
  ::sync();
  RawDiskOptions raw;
  raw.files = files;
  Disk disk;
  for (int pass = 0; pass < 2; ++pass) {
    raw.threads = o.shards * o.reader_threads;
    raw.duration = o.raw_disk_time / 2;
    raw.seed = 1 + pass;
    ASSIGN_OR_RETURN(RawDiskResult r, MeasureRandomReads(raw));
    disk.reads_per_s = std::max(disk.reads_per_s, r.reads_per_second());
    raw.threads = 1;
    raw.duration = absl::Milliseconds(500);
    ASSIGN_OR_RETURN(RawDiskResult one, MeasureRandomReads(raw));
    const double latency = one.latency_us.Percentile(0.5);
    disk.latency_us = pass == 0 ? latency : std::min(disk.latency_us, latency);
  }
  return disk;
}

// The request path without the disk: the median time from the end of
// Prefetch to the arrival of the first layer's rows, in a short run with
// every shard whole in RAM (nothing read from disk), at 500 us a block.
absl::StatusOr<double> CalibratePath(const TiersOptions& o, const std::vector<std::string>& dirs,
                                     const std::vector<ShardFootprint>& footprints,
                                     const TierReplay& replay) {
  TiersOptions c = o;
  c.decode_steps = std::min(o.decode_steps, 100);
  Prediction whole;
  ASSIGN_OR_RETURN(whole.replay, replay.Run(replay.shard_bytes()));
  ASSIGN_OR_RETURN(Run r, RunOne(c, dirs, footprints, 100, PlacementPolicy::kFrequency,
                                 absl::Microseconds(500), std::move(whole)));
  if (r.loop.layer_fetch_ms.empty() || r.loop.decode_steps == 0) {
    return absl::InternalError("the calibration run measured no fetch");
  }
  const double prefetch_us = 1e6 * r.loop.prefetch_seconds / r.loop.decode_steps;
  const double arrival_us = 1e3 * Percentile(r.loop.layer_fetch_ms[0], 0.5);
  std::printf(
      "table-over-ram: request path: %d steps with every shard whole: the first layer's rows "
      "arrive %.0f us (p50) after Prefetch began, which took %.0f us (mean); the planner's "
      "model takes a path of %.0f us\n",
      r.loop.decode_steps, arrival_us, prefetch_us, std::max(0.0, arrival_us - prefetch_us));
  return std::max(0.0, arrival_us - prefetch_us);
}

constexpr double kTailCalibrationPct = 50;  // both layers read the tail there

// The tail read as the planner's model should charge it on this machine:
// a short run by frequency at kTailCalibrationPct, 500 us a block, and
// FitTailReads of each layer's fetch (the first from the end of Prefetch,
// each later one from the arrival of the one before) less the calibrated
// path against the replayed tail rows of the same steps. `disk` (measured
// just before) gains read_latency_us (at least its depth-1 latency) and
// read_rate_share; when the run cannot be fitted it is returned as it
// was, and the report says so.
absl::StatusOr<Disk> CalibrateTail(const TiersOptions& o, const std::vector<std::string>& dirs,
                                   const std::vector<ShardFootprint>& footprints,
                                   const TierReplay& replay, Disk disk) {
  TiersOptions c = o;
  c.decode_steps = std::min(o.decode_steps, 100);
  const absl::Duration k500 = absl::Microseconds(500);
  const uint64_t budget =
      std::min(footprints[0].share_budget(kTailCalibrationPct / 100), replay.shard_bytes());
  ASSIGN_OR_RETURN(Prediction p,
                   Predict(c, replay, budget, PlacementPolicy::kFrequency, disk, k500));
  ASSIGN_OR_RETURN(Run r, RunOne(c, dirs, footprints, kTailCalibrationPct,
                                 PlacementPolicy::kFrequency, k500, std::move(p)));
  const std::vector<std::vector<double>>& ms = r.loop.layer_fetch_ms;
  const double prefetch_us = 1e6 * r.loop.prefetch_seconds / std::max(1, r.loop.decode_steps);
  std::vector<std::vector<double>> fetch_us(ms.size());
  for (size_t l = 0; l < ms.size(); ++l) {
    for (size_t step = 0; step < ms[l].size(); ++step) {
      const double from_us = l == 0 ? prefetch_us : 1e3 * ms[l - 1][step];
      fetch_us[l].push_back(1e3 * ms[l][step] - from_us);
    }
  }
  const double raw_share = disk.reads_per_s / o.shards;
  absl::StatusOr<TailReadFit> fit =
      FitTailReads(replay, r.predicted.replay, fetch_us, disk.path_us);
  if (!fit.ok()) {
    std::printf(
        "table-over-ram: tail reads: %d steps by frequency at %.0f%%: no fit (%s); the planner's "
        "model takes the raw disk's %.0f us and %.0f reads/s a shard\n",
        r.loop.decode_steps, kTailCalibrationPct, std::string(fit.status().message()).c_str(),
        disk.latency_us, raw_share);
    return disk;
  }
  disk.read_latency_us = std::max(disk.latency_us, fit->latency_us);
  disk.read_rate_share = fit->iops / raw_share;
  std::printf(
      "table-over-ram: tail reads: %d steps by frequency at %.0f%%: the %zu layer fetches that "
      "read the tail took the path + %.0f us + t / %.0f reads/s (t: the busiest shard's tail "
      "rows; Theil-Sen fit), where the raw disk gives %.0f us at depth 1 and %.0f reads/s a "
      "shard; the planner's model takes %.0f us and %.2f x the raw rate measured before each "
      "budget\n",
      r.loop.decode_steps, kTailCalibrationPct, fit->fetches, fit->latency_us, fit->iops,
      disk.latency_us, raw_share, disk.read_latency_us, disk.read_rate_share);
  return disk;
}

}  // namespace

absl::Status RunTableOverRam(const TiersOptions& o) {
  ASSIGN_OR_RETURN(std::vector<std::string> dirs,
                   PrepareShards(o.workload, o.shards, TailFormat::kBlock));
  TierPlanCleanup cleanup(dirs);
  std::vector<ShardFootprint> footprints;
  for (const std::string& d : dirs) {
    ASSIGN_OR_RETURN(ShardFootprint f, MeasureShardFootprint(d, /*direct_io=*/true));
    footprints.push_back(f);
  }
  const std::string trace_path = absl::StrCat(o.log_dir, "/tiers-", o.decode_steps, ".trace");
  RETURN_IF_ERROR(WriteLoopTrace(*o.trace, o.batch, o.decode_steps, trace_path));
  TierReplayOptions ro;
  ro.table_dir = o.workload.table_dir;
  ro.n_shards = static_cast<uint32_t>(o.shards);
  ro.trace_path = trace_path;
  ro.profile_trace_path = o.workload.profile_trace;
  ro.batch = o.batch;
  // Budgets are spent as engram-shard spends them: shard 0's fixed bytes first.
  ro.fixed_bytes = footprints[0].fixed_bytes;
  ASSIGN_OR_RETURN(std::unique_ptr<TierReplay> replay, TierReplay::Create(ro));
  uint64_t table_bytes = 0;
  for (const LayerInfo& l : o.table->manifest().layers) {
    table_bytes += l.rows * static_cast<uint64_t>(l.row_bytes);
  }
  {
    ASSIGN_OR_RETURN(
        std::unique_ptr<MemoryCgroup> probe,
        MemoryCgroup::Create(absl::StrCat("engram-bench-tiers-", ::getpid()), 1 << 30));
    std::printf(
        "table-over-ram: %s, %.1f MB table, %d shards (block tail, O_DIRECT), each in a %s\n",
        o.workload.table_dir.c_str(), table_bytes / 1e6, o.shards, probe->version().c_str());
  }
  for (size_t i = 0; i < footprints.size(); ++i) {
    std::printf(
        "table-over-ram: shard %zu: fixed %llu bytes (RocksDB's index), whole-shard budget %.1f "
        "MB\n",
        i, static_cast<unsigned long long>(footprints[i].fixed_bytes),
        footprints[i].whole_shard_budget() / 1e6);
  }
  std::printf(
      "table-over-ram: %d decode steps of %d sequences without prefill per run, %d blocks; "
      "each cgroup's limit is the shard's budget + %llu MiB; each layer sent with its need-by "
      "once the one before it arrived (pipeline_layers)\n",
      o.decode_steps, o.batch, o.blocks, static_cast<unsigned long long>(o.overhead_bytes >> 20));

  std::vector<Run> runs;
  const std::vector<std::string> files = SstFiles(dirs);
  const PlacementPolicy kPolicies[] = {PlacementPolicy::kWindow, PlacementPolicy::kFrequency};
  ASSIGN_OR_RETURN(const double path_us, CalibratePath(o, dirs, footprints, *replay));
  ASSIGN_OR_RETURN(Disk disk, MeasureDisk(o, files));
  disk.path_us = path_us;
  ASSIGN_OR_RETURN(disk, CalibrateTail(o, dirs, footprints, *replay, disk));
  auto run_budget = [&](double pct, PlacementPolicy policy, absl::Duration block) -> absl::Status {
    // The replay's budget: shard 0's, at most what holds it whole (the
    // footprint's whole-shard budget keeps a little to spare).
    const uint64_t budget = std::min(footprints[0].share_budget(pct / 100), replay->shard_bytes());
    ASSIGN_OR_RETURN(Prediction p, Predict(o, *replay, budget, policy, disk, block));
    ASSIGN_OR_RETURN(Run r, RunOne(o, dirs, footprints, pct, policy, block, std::move(p)));
    r.raw_reads_per_s = disk.reads_per_s;
    std::fprintf(stderr,
                 "table-over-ram: %.0f%% %s %s: hit %.4f (predicted %.4f), exposed %.2f%% "
                 "(bound %.2f%%, predicted %.2f%%)\n",
                 pct, PlacementPolicyName(policy), absl::FormatDuration(block).c_str(), r.hit_ratio,
                 r.predicted.replay.hit_ratio(), r.loop.exposed_wait_pct, r.predicted.bound_pct,
                 r.predicted.exposed_pct);
    runs.push_back(std::move(r));
    return absl::OkStatus();
  };
  for (double pct : o.budget_pcts) {
    ASSIGN_OR_RETURN(const Disk raw, MeasureDisk(o, files));
    disk.reads_per_s = raw.reads_per_s;  // the calibrations stay
    disk.latency_us = raw.latency_us;
    uint64_t caps = 0;
    for (const ShardFootprint& f : footprints) caps += f.share_budget(pct / 100) + o.overhead_bytes;
    std::printf(
        "table-over-ram: budget %.0f%%: the table is %.2f x the sum of the caps (%.1f MB); raw "
        "O_DIRECT %.0f reads/s at depth %d, %.0f us at depth 1\n",
        pct, static_cast<double>(table_bytes) / static_cast<double>(caps), caps / 1e6,
        disk.reads_per_s, o.shards * o.reader_threads, disk.latency_us);
    const size_t first = runs.size();
    for (PlacementPolicy policy : kPolicies) {
      for (absl::Duration block : o.block_times) RETURN_IF_ERROR(run_budget(pct, policy, block));
    }
    // The shards' mean rate over a run is far below the disk's: above the
    // raw passes, it shows they met a moment the device was slow.
    for (size_t i = first; i < runs.size(); ++i) {
      if (runs[i].reads_per_s <= disk.reads_per_s) continue;
      std::printf(
          "table-over-ram: budget %.0f%%: WARNING: the shards read %.0f reads/s, more than the raw "
          "passes' %.0f: those passes met a slow moment of the disk, so this budget's bound and "
          "prediction describe a slower disk than the runs had; run it again\n",
          pct, runs[i].reads_per_s, disk.reads_per_s);
      break;
    }
  }
  // The planner's smallest budget for 1% at 500 us, per policy, run too.
  const absl::Duration k500 = absl::Microseconds(500);
  if (o.run_target_budgets) {
    for (PlacementPolicy policy : kPolicies) {
      ASSIGN_OR_RETURN(TargetBudget t,
                       SmallestBudgetForTarget(*replay, 1.0, policy, Model(o, disk, k500)));
      std::printf(
          "table-over-ram: the planner's smallest budget for 1%% at 500 us, %s: %s\n",
          PlacementPolicyName(policy),
          t.found ? absl::StrFormat("%g%%", t.percent).c_str() : "none (not a whole shard)");
      if (!t.found) continue;
      // Then, while the run misses 1%, budgets o.probe_step_pct larger, up to
      // the whole shard: what the target needs here, beside what the
      // planner predicted it needs.
      for (double pct = t.percent;; pct = std::min(100.0, pct + o.probe_step_pct)) {
        const Run* done = nullptr;
        for (const Run& r : runs) {
          if (r.pct == pct && r.policy == policy && r.block == k500) done = &r;
        }
        if (done == nullptr) {
          RETURN_IF_ERROR(run_budget(pct, policy, k500));
          done = &runs.back();
        }
        if (done->loop.exposed_wait_pct <= 1.0 || pct >= 100 || o.probe_step_pct <= 0) break;
      }
    }
  }
  PrintRuns(o, runs);
  // The planner's worst hit-ratio error over every run.
  double worst = 0;
  for (const Run& r : runs) {
    worst = std::max(worst, 100 * std::abs(r.hit_ratio - r.predicted.replay.hit_ratio()));
  }
  for (const Run& r : runs) {
    std::printf(
        "bench-tiers: budget_pct=%g policy=%s block_us=%.0f hit_ratio=%.4f exposed_wait_pct=%.2f "
        "bound_pct=%.2f predicted_pct=%.2f\n",
        r.pct, PlacementPolicyName(r.policy), absl::ToDoubleMicroseconds(r.block), r.hit_ratio,
        r.loop.exposed_wait_pct, r.predicted.bound_pct, r.predicted.exposed_pct);
  }
  std::printf("bench-tiers: planner_max_hit_error_pts=%.2f\n", worst);
  std::string smallest[2] = {"none", "none"};
  for (int k = 0; k < 2; ++k) {
    double best = 1e9;
    for (const Run& r : runs) {
      if (r.policy == kPolicies[k] && r.block == k500 && r.loop.exposed_wait_pct <= 1.0) {
        best = std::min(best, r.pct);
      }
    }
    if (best < 1e9) smallest[k] = absl::StrFormat("%g", best);
  }
  std::printf("bench-tiers: budget_for_1pct_500us window=%s frequency=%s\n", smallest[0].c_str(),
              smallest[1].c_str());
  return absl::OkStatus();
}

}  // namespace engram::bench

#include "bench/client/bench_tiers.h"

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
#include "shard/plan/tier_replay.h"

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

// One budget at one block time.
struct Run {
  double pct = 0;
  absl::Duration block;
  InferenceLoopResult loop;
  std::vector<ShardRun> shards;
  double hit_ratio = 0, tail_rows_per_s = 0, reads_per_s = 0;
  double predicted_hit_ratio = 0, predicted_tail_rows_per_s = 0;
  double raw_reads_per_s = 0;
  double steps_per_s = 0;
  std::vector<double> fetch_p50, fetch_p99;  // per layer, ms
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

absl::StatusOr<Run> RunOne(const TiersOptions& o, const std::vector<std::string>& dirs,
                           const std::vector<ShardFootprint>& footprints, double pct,
                           absl::Duration block, const BudgetReplay& predicted,
                           const TierReplay& replay) {
  Run run;
  run.pct = pct;
  run.block = block;
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
    s.budget = std::max(
        footprints[i].fixed_bytes,
        static_cast<uint64_t>(
            std::llround(pct / 100.0 * static_cast<double>(footprints[i].whole_shard_budget()))));
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
      s.hit_ratio = r.hot_pct() / 100;
      s.tail_rows_per_s = r.disk / secs;
      s.reads_per_s = (after[i].file_reads - before[i].file_reads) / secs;
      s.predicted_hit_ratio = predicted.shards[i].hit_ratio();
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
  run.predicted_hit_ratio = predicted.hit_ratio();
  run.steps_per_s = run.loop.decode_steps / std::max(1e-9, run.loop.run_seconds);
  run.predicted_tail_rows_per_s = static_cast<double>(predicted.all().disk) /
                                  static_cast<double>(std::max<uint64_t>(1, replay.steps())) *
                                  run.steps_per_s;
  for (const std::vector<double>& ms : run.loop.layer_fetch_ms) {
    run.fetch_p50.push_back(Percentile(ms, 0.5));
    run.fetch_p99.push_back(Percentile(ms, 0.99));
  }
  return run;
}

void PrintRuns(const TiersOptions& o, const std::vector<Run>& runs) {
  std::printf(
      "\nper budget and block time (hit = rows served from RAM; tail = rows read from disk, "
      "reads = SST reads, raw = O_DIRECT 4 KiB reads/s at the same depth; predicted by the "
      "planner's replay)\n");
  std::printf("%7s %6s %8s %8s %10s %10s %10s %10s %6s %8s %17s %17s\n", "budget", "us/blk", "hit",
              "pred hit", "tail/s", "pred", "reads/s", "raw/s", "disk", "exposed",
              "fetch L0 p50/p99", "fetch L1 p50/p99");
  for (const Run& r : runs) {
    std::string fetch[2];
    for (size_t l = 0; l < 2 && l < r.fetch_p50.size(); ++l) {
      fetch[l] = absl::StrFormat("%.2f/%.2f ms", r.fetch_p50[l], r.fetch_p99[l]);
    }
    std::printf("%6.0f%% %6.0f %8.4f %8.4f %10.0f %10.0f %10.0f %10.0f %5.1f%% %7.2f%% %17s %17s\n",
                r.pct, absl::ToDoubleMicroseconds(r.block), r.hit_ratio, r.predicted_hit_ratio,
                r.tail_rows_per_s, r.predicted_tail_rows_per_s, r.reads_per_s, r.raw_reads_per_s,
                100 * r.reads_per_s / std::max(1.0, r.raw_reads_per_s), r.loop.exposed_wait_pct,
                fetch[0].c_str(), fetch[1].c_str());
  }
  std::printf(
      "\nper shard (budget = --ram-budget; cap = its memory cgroup's limit, budget + %llu MiB; "
      "peak = the group's most charged; anon/file = its anonymous and page-cache bytes at the "
      "run's end; limit hits = times the group reached its limit, each met by reclaim)\n",
      static_cast<unsigned long long>(o.overhead_bytes >> 20));
  std::printf("%7s %6s %5s %10s %10s %10s %8s %8s %6s %8s %8s %10s %10s %8s\n", "budget", "us/blk",
              "shard", "budget MB", "cap MB", "peak MB", "anon MB", "file MB", "hits", "hit",
              "pred hit", "tail/s", "reads/s", "rpc ms");
  for (const Run& r : runs) {
    for (size_t i = 0; i < r.shards.size(); ++i) {
      const ShardRun& s = r.shards[i];
      std::printf(
          "%6.0f%% %6.0f %5zu %10.1f %10.1f %10.1f %8.1f %8.1f %6llu %8.4f %8.4f %10.0f %10.0f "
          "%8.2f\n",
          r.pct, absl::ToDoubleMicroseconds(r.block), i, s.budget / 1e6, s.cap / 1e6, s.peak / 1e6,
          s.anon / 1e6, s.file / 1e6, static_cast<unsigned long long>(s.limit_hits), s.hit_ratio,
          s.predicted_hit_ratio, s.tail_rows_per_s, s.reads_per_s, s.rpc_ms);
    }
  }
}

}  // namespace

absl::Status RunTableOverRam(const TiersOptions& o) {
  ASSIGN_OR_RETURN(std::vector<std::string> dirs,
                   PrepareShards(o.workload, o.shards, TailFormat::kBlock));
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
      "each cgroup's limit is the shard's budget + %llu MiB\n",
      o.decode_steps, o.batch, o.blocks, static_cast<unsigned long long>(o.overhead_bytes >> 20));

  std::vector<Run> runs;
  const std::vector<std::string> files = SstFiles(dirs);
  for (double pct : o.budget_pcts) {
    RawDiskOptions raw;
    raw.files = files;
    raw.threads = o.shards * o.reader_threads;
    raw.duration = o.raw_disk_time;
    ASSIGN_OR_RETURN(RawDiskResult disk, MeasureRandomReads(raw));
    // The planner's replay at shard 0's budget.
    const uint64_t budget0 = std::max(
        footprints[0].fixed_bytes,
        static_cast<uint64_t>(
            std::llround(pct / 100.0 * static_cast<double>(footprints[0].whole_shard_budget()))));
    ASSIGN_OR_RETURN(BudgetReplay predicted, replay->Run(budget0));
    uint64_t caps = 0;
    for (const ShardFootprint& f : footprints) {
      caps +=
          std::max(f.fixed_bytes, static_cast<uint64_t>(std::llround(
                                      pct / 100.0 * static_cast<double>(f.whole_shard_budget())))) +
          o.overhead_bytes;
    }
    std::printf(
        "table-over-ram: budget %.0f%%: the table is %.2f x the sum of the caps (%.1f MB); raw "
        "O_DIRECT %.0f reads/s at depth %d\n",
        pct, static_cast<double>(table_bytes) / static_cast<double>(caps), caps / 1e6,
        disk.reads_per_second(), raw.threads);
    for (absl::Duration block : o.block_times) {
      ASSIGN_OR_RETURN(Run r, RunOne(o, dirs, footprints, pct, block, predicted, *replay));
      r.raw_reads_per_s = disk.reads_per_second();
      std::fprintf(stderr, "table-over-ram: %.0f%% %s: hit %.4f (predicted %.4f), exposed %.2f%%\n",
                   pct, absl::FormatDuration(block).c_str(), r.hit_ratio, r.predicted_hit_ratio,
                   r.loop.exposed_wait_pct);
      runs.push_back(std::move(r));
    }
  }
  PrintRuns(o, runs);
  // The planner's worst hit-ratio error over every run, at any block time.
  double worst = 0;
  for (const Run& r : runs)
    worst = std::max(worst, 100 * std::abs(r.hit_ratio - r.predicted_hit_ratio));
  for (double pct : o.budget_pcts) {
    const Run* at500 = nullptr;
    for (const Run& r : runs) {
      if (r.pct == pct && r.block == absl::Microseconds(500)) at500 = &r;
    }
    if (at500 == nullptr) continue;
    std::printf(
        "bench-tiers: budget_pct=%g hit_ratio=%.4f predicted_hit_ratio=%.4f tail_reads_per_s=%.0f "
        "disk_ratio=%.3f exposed_wait_500us_pct=%.2f\n",
        pct, at500->hit_ratio, at500->predicted_hit_ratio, at500->reads_per_s,
        at500->reads_per_s / std::max(1.0, at500->raw_reads_per_s), at500->loop.exposed_wait_pct);
  }
  std::printf("bench-tiers: planner_max_hit_error_pts=%.2f\n", worst);
  return absl::OkStatus();
}

}  // namespace engram::bench

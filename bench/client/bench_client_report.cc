#include "bench/client/bench_client_report.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace engram::bench {
namespace {

double PerStepMs(double seconds, const InferenceLoopResult& r) {
  return r.decode_steps > 0 ? 1e3 * seconds / r.decode_steps : 0;
}

double LocalHitPct(const InferenceLoopResult& r) {
  return r.client.unique_rows > 0 ? 100.0 * static_cast<double>(r.client.local_hits) /
                                        static_cast<double>(r.client.unique_rows)
                                  : 0;
}

void PrintClosedLoop(const std::vector<RunOutcome>& runs) {
  std::printf(
      "\nclosed loop (no simulated compute; a step = Prefetch, then Wait for every layer)\n");
  std::printf("%6s %6s %9s %9s %11s %11s %9s %7s %13s %17s\n", "shards", "steps", "step p50",
              "step p99", "rows/s", "ids/s", "tokens/s", "hot %", "pre+gather ms",
              "CPU ms/step c+s");
  for (const RunOutcome& o : runs) {
    if (o.spec.block != absl::ZeroDuration() || o.spec.local_cache_pct > 0) continue;
    const InferenceLoopResult& r = o.loop;
    const double s = std::max(1e-9, r.decode_seconds);
    std::printf("%6d %6d %7.2fms %7.2fms %11.0f %11.0f %9.0f %6.1f%% %5.2f + %5.2f %8.2f + %6.2f\n",
                o.spec.shards, r.decode_steps, Percentile(r.step_ms, 0.5),
                Percentile(r.step_ms, 0.99), static_cast<double>(r.decode_unique_rows) / s,
                static_cast<double>(r.decode_ids) / s, r.decode_tokens_per_second(),
                o.tiers.hot_pct(), PerStepMs(r.prefetch_seconds, r), PerStepMs(r.gather_seconds, r),
                PerStepMs(r.decode_cpu_seconds, r), PerStepMs(o.shard_cpu_seconds, r));
  }
}

void PrintSimulated(const ReportSetup& setup, const std::vector<RunOutcome>& runs) {
  std::printf(
      "\nsimulated compute (%d blocks; exposed wait = time blocked in WaitArrived, %% of step\n"
      "time; late = the loop woke late from its block sleeps, CPU contention; prefill exp = the\n"
      "same over the prefill chunks, each prefetched while the chunk before computes)\n",
      setup.blocks);
  std::string layers;
  for (int64_t b : setup.layer_blocks) {
    absl::StrAppend(&layers, absl::StrFormat(" %7s", absl::StrCat("blk", b, " %")));
  }
  std::string fetch;
  for (int64_t b : setup.layer_blocks) {
    absl::StrAppend(&fetch, absl::StrFormat(" %15s", absl::StrCat("fetch", b, " p50/p99")));
  }
  std::printf("%6s %6s %6s %5s %8s%s %7s%s %15s %7s %7s %15s %12s\n", "shards", "us/blk", "local",
              "steps", "exposed", layers.c_str(), "late %", fetch.c_str(), "step p50/p99", "hot %",
              "local %", "CPU ms/step c+s", "prefill exp");
  for (const RunOutcome& o : runs) {
    if (o.spec.block == absl::ZeroDuration()) continue;
    const InferenceLoopResult& r = o.loop;
    std::string per_layer, per_fetch;
    for (size_t l = 0; l < r.layer_exposed_wait_pct.size(); ++l) {
      absl::StrAppend(&per_layer, absl::StrFormat(" %6.2f%%", r.layer_exposed_wait_pct[l]));
      absl::StrAppend(&per_fetch,
                      absl::StrFormat(" %6.2f/%6.2fms", Percentile(r.layer_fetch_ms[l], 0.5),
                                      Percentile(r.layer_fetch_ms[l], 0.99)));
    }
    const double late_pct =
        r.decode_seconds > 0 ? 100.0 * r.late_wake_seconds / r.decode_seconds : 0;
    std::printf(
        "%6d %6lld %5.0f%% %5d %7.2f%%%s %6.2f%%%s %6.2f/%6.2fms %6.1f%% %6.1f%% %6.2f + %6.2f "
        "%11.2f%%\n",
        o.spec.shards, static_cast<long long>(absl::ToInt64Microseconds(o.spec.block)),
        o.spec.local_cache_pct, r.decode_steps, r.exposed_wait_pct, per_layer.c_str(), late_pct,
        per_fetch.c_str(), Percentile(r.step_ms, 0.5), Percentile(r.step_ms, 0.99),
        o.tiers.hot_pct(), LocalHitPct(r), PerStepMs(r.decode_cpu_seconds, r),
        PerStepMs(o.shard_cpu_seconds, r), r.prefill_exposed_wait_pct);
  }
}

}  // namespace

std::string Describe(const RunSpec& spec) {
  std::string s = absl::StrCat(spec.shards, spec.shards == 1 ? " shard, " : " shards, ");
  if (spec.block == absl::ZeroDuration()) {
    absl::StrAppend(&s, "closed loop");
  } else {
    absl::StrAppend(&s, absl::ToInt64Microseconds(spec.block), " us/block");
  }
  if (spec.local_cache_pct > 0) absl::StrAppend(&s, ", local cache ", spec.local_cache_pct, "%");
  return s;
}

void PrintReport(const ReportSetup& setup, const std::vector<RunOutcome>& runs) {
  std::printf(
      "engram-bench-client: the client library against engram-shard processes on 127.0.0.1\n");
  std::printf("%-14s %s\n", "tokens", setup.workload.c_str());
  std::printf("%-14s v41 geometry, engram_vocab_size %lld: %llu rows, %.0f MB\n", "table",
              static_cast<long long>(setup.vocab),
              static_cast<unsigned long long>(setup.table_rows),
              static_cast<double>(setup.table_bytes) / 1e6);
  if (setup.hot_pct >= 100) {
    std::printf(
        "%-14s --ram-budget holds each shard whole (every row pinned), %s, restarted "
        "per run\n",
        "shards", setup.tail_format.c_str());
  } else {
    std::printf(
        "%-14s --ram-budget %.0f%% of what holds each shard whole (%d%% of its hot tier pinned "
        "from the profile), %s, restarted per run\n",
        "shards", setup.hot_pct, 100 - setup.hot_cache_share, setup.tail_format.c_str());
  }
  if (setup.transport == "grpc") {
    std::printf("%-14s gRPC (--transport), HTTP/2 bandwidth probing %s\n", "client",
                setup.http2_bdp_probe ? "on" : "off (a fixed 16 MiB window; --http2_bdp_probe)");
  } else {
    std::printf("%-14s the shards' row streams (--transport)\n", "client");
  }
  std::printf("%-14s %ld cores; 1-minute load average %.2f before the runs\n", "machine",
              sysconf(_SC_NPROCESSORS_ONLN), setup.load_average);
  std::string blocks;
  for (int64_t b : setup.layer_blocks) absl::StrAppend(&blocks, blocks.empty() ? "" : " and ", b);
  std::printf("%-14s batch %d, prefill %d, then decode steps; Engram layers at blocks %s\n",
              "workload", setup.batch, setup.prefill, blocks.c_str());
  for (const RunOutcome& o : runs) {
    if (!o.spec.measure_skew) continue;
    std::printf(
        "%-14s the top 1%% / 10%% of the rows touched (%.2f%% of the table) get %.1f%% / %.1f%% of "
        "lookups\n",
        "skew", o.loop.touched_rows_pct, o.loop.top1_share_pct, o.loop.top10_share_pct);
  }
  uint64_t verified = 0, wrong = 0;
  for (const RunOutcome& o : runs) {
    verified += o.loop.verified;
    wrong += o.loop.wrong;
  }
  std::printf("%-14s %llu rows checked against the table, %llu wrong; %zu runs in %.0f s\n",
              "verification", static_cast<unsigned long long>(verified),
              static_cast<unsigned long long>(wrong), runs.size(), setup.seconds);
  PrintClosedLoop(runs);
  PrintSimulated(setup, runs);

  int most = 0;
  for (const RunOutcome& o : runs) most = std::max(most, o.spec.shards);
  auto headline = [&](int us) {
    for (const RunOutcome& o : runs) {
      if (o.spec.shards == most && o.spec.local_cache_pct == 0 &&
          o.spec.block == absl::Microseconds(us)) {
        return o.loop.exposed_wait_pct;
      }
    }
    return -1.0;
  };
  std::printf("\nbench-client: exposed_wait_500us_pct=%.2f exposed_wait_100us_pct=%.2f\n",
              headline(500), headline(100));
}

}  // namespace engram::bench

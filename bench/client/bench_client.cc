// engram-bench-client: the client library end to end against real
// engram-shard processes on 127.0.0.1 (docs/benchmarks.md, "Client library").
//
// For 1, 2 and 3 shards (each process with a hot tier of --hot-pct of its
// rows, pinned from a hot-row profile learnt on other sequences than the
// ones replayed) it runs the simulated inference loop of tools/demo:
//   - closed loop (no simulated compute): step latency and rows/s;
//   - 40 blocks of 100 us and 500 us: the exposed wait, the time the loop
//     is blocked waiting for rows, as a share of step time;
// and, on 3 shards, the same with the worker-side hot-row cache
// (ClientOptions::worker_cache_bytes) at --local-cache-pcts of the table.
// Every run starts fresh shard processes, so each sees the same hot tier.
// The last line is
//   bench-client: exposed_wait_500us_pct=X exposed_wait_100us_pct=Y
// for 3 shards without a local cache. Exit 0 only when every run succeeded
// and every verified row matched the table.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/client/bench_client_report.h"
#include "bench/client/bench_tiers.h"
#include "bench/common/bench_client_setup.h"
#include "bench/common/bench_client_shards.h"
#include "client/engram_client.h"
#include "common/format/table.h"
#include "common/util/flags.h"
#include "common/util/status_macros.h"
#include "inference/inference_loop.h"
#include "shard/hot_tier.h"

ABSL_FLAG(std::string, work_dir, "",
          "cache of traces, tables and shards (default BUILD/bench-client)");
ABSL_FLAG(std::string, trace, "", "token trace (default: real text, see bench_client_setup.h)");
ABSL_FLAG(std::string, token_map, "", "token map for a --trace (default: none)");
ABSL_FLAG(int64_t, vocab, 20000, "engram_vocab_size of the v41 table");
ABSL_FLAG(std::string, shards, "1,2,3", "shard counts to run");
ABSL_FLAG(double, hot_pct, 100,
          "each shard's --ram-budget, percent of the budget that holds it whole (engramctl "
          "footprint's whole_shard_budget; 100 = every row in RAM)");
ABSL_FLAG(std::string, tail_format, "block",
          "engramctl import --tail-format of the shards: block (the tail read with O_DIRECT) "
          "or cuckoo (needs --hot-pct 100: its tail would be read through the page cache)");
ABSL_FLAG(std::string, local_cache_pcts, "1,5", "worker-side cache sizes, percent of the table");
// Library defaults where a flag stands for an option (ClientOptions,
// InferenceLoopOptions, ShardServerOptions); the benchmark's own choices are
// said in each flag's help.
static const engram::ClientOptions kClientDefaults;
static const engram::InferenceLoopOptions kLoopDefaults;

ABSL_FLAG(int32_t, batch, kLoopDefaults.batch, "sequences per step");
ABSL_FLAG(int32_t, prefill, kLoopDefaults.prefill, "prefill tokens per sequence");
ABSL_FLAG(int32_t, prefill_chunk, 32,
          "prefill tokens per sequence in one chunk (0 = the whole prefill); chunk k + 1 is "
          "prefetched while chunk k computes");
ABSL_FLAG(int32_t, blocks, kLoopDefaults.blocks, "simulated transformer blocks per step");
ABSL_FLAG(std::string, block_us, "0,100,500",
          "simulated compute per block, microseconds (0 = closed loop)");
ABSL_FLAG(int32_t, closed_loop_steps, 300, "decode steps of a closed-loop run");
ABSL_FLAG(double, step_ms_total, 4000,
          "decode steps of a simulated run: this many ms of nominal step time");
ABSL_FLAG(int32_t, verify_per_layer, 16, "rows verified per layer per step");
ABSL_FLAG(int32_t, max_run_seconds, 30, "a run's decode steps stop after this long");
ABSL_FLAG(bool, shards_skip_worker_cache, true,
          "with a local cache, tell the shards its size (engram-shard "
          "--worker-cache-bytes) so their hot tiers pin the rows after it");
ABSL_FLAG(int32_t, hot_cache_share, -1,
          "the shards' --hot-cache-share: percent of the hot tier kept for the admission "
          "cache (-1 = the server's default, 20)");
ABSL_FLAG(int32_t, shard_reader_threads, 0, "engram-shard --reader-threads (0 = its default)");
ABSL_FLAG(std::string, encoding, "e4m3_e8m0",
          "the generated table's row encoding: e4m3_e8m0 (the checkpoint's fp8) or a ggml or "
          "plain one (q8_0, q2_k..q6_k, mxfp4, bf16, f16, f32)");
ABSL_FLAG(std::string, format, "bf16", "how the loop gathers rows: bf16, f32 or raw");
ABSL_FLAG(int32_t, channels_per_replica, kClientDefaults.channels_per_replica,
          "ClientOptions::channels_per_replica");
ABSL_FLAG(uint32_t, max_rows_per_rpc, kClientDefaults.max_rows_per_rpc,
          "ClientOptions::max_rows_per_rpc");
ABSL_FLAG(std::string, transport, "row_stream",
          "ClientOptions::transport: row_stream (the default) or grpc");
ABSL_FLAG(bool, http2_bdp_probe, false,
          "ClientOptions::http2_bdp_probe (off here: a latency-bound decode loop; on "
          "brings back ~10 ms stalls on 1-5% of steps with several shards)");
ABSL_FLAG(bool, realtime_loop, true,
          "run the loop thread under SCHED_FIFO so the simulated compute ends on time");
ABSL_FLAG(std::string, shard_binary, "", "engram-shard (default: next to this binary)");
ABSL_FLAG(bool, table_over_ram, false,
          "instead of the runs above: the table several times the shards' memory, each shard "
          "in a memory cgroup, per --tiers-budget-pcts (bench/client/bench_tiers.h)");
ABSL_FLAG(int64_t, tiers_vocab, 110000, "--table-over-ram: engram_vocab_size of its v41 table");
ABSL_FLAG(std::string, tiers_budget_pcts, "5,10,25,50",
          "--table-over-ram: budgets, percent of the budget that holds a shard whole");
ABSL_FLAG(int32_t, tiers_steps, 300, "--table-over-ram: decode steps per run");
ABSL_FLAG(int32_t, tiers_shards, 3, "--table-over-ram: shard servers the table is split over");
ABSL_FLAG(bool, tiers_target_budgets, true,
          "--table-over-ram: run the planner's smallest budget for 1% at 500 us too, per policy");
ABSL_FLAG(int32_t, tiers_overhead_mb, 64,
          "--table-over-ram: MiB added to each shard's budget for its cgroup's limit");

namespace engram::bench {
namespace {

namespace fs = std::filesystem;

int Fail(const std::string& line) {
  std::fprintf(stderr, "bench-client: %s\n", line.c_str());
  return 1;
}

std::string BinDir() {
  std::error_code ec;
  return fs::read_symlink("/proc/self/exe", ec).parent_path().string();
}

// The 1-minute load average (/proc/loadavg), 0 when unreadable.
double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double load = 0;
  in >> load;
  return load;
}

absl::StatusOr<std::vector<double>> ParseList(const std::string& flag, const std::string& text) {
  std::vector<double> out;
  for (absl::string_view s : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    double v;
    if (!absl::SimpleAtod(s, &v) || v < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", std::string(s), "' is not a non-negative number"));
    }
    out.push_back(v);
  }
  return out;
}

// What every run shares.
struct Env {
  Workload workload;
  std::string shard_binary;
  std::string log_dir;
  std::unique_ptr<TableReader> table;
  uint64_t table_bytes = 0;
  TokenTrace trace{{}};
  RowFormat format = RowFormat::kBf16;
  TailFormat tail_format = TailFormat::kCuckoo;
};

absl::StatusOr<RunOutcome> RunOne(const Env& env, const RunSpec& spec) {
  ASSIGN_OR_RETURN(std::vector<std::string> dirs,
                   PrepareShards(env.workload, spec.shards, env.tail_format));
  Deployment::Options d;
  d.binary = env.shard_binary;
  d.shard_dirs = dirs;
  d.hot_share = absl::GetFlag(FLAGS_hot_pct) / 100.0;
  d.log_dir = env.log_dir;
  d.reader_threads = absl::GetFlag(FLAGS_shard_reader_threads);
  if (absl::GetFlag(FLAGS_hot_cache_share) >= 0) {
    d.hot_cache_share = absl::GetFlag(FLAGS_hot_cache_share);
  }
  const uint64_t worker_cache_bytes =
      static_cast<uint64_t>(spec.local_cache_pct / 100.0 * static_cast<double>(env.table_bytes));
  if (absl::GetFlag(FLAGS_shards_skip_worker_cache)) d.worker_cache_bytes = worker_cache_bytes;
  ASSIGN_OR_RETURN(std::unique_ptr<Deployment> dep, Deployment::Start(d));

  ClientOptions co;
  co.table_dir = env.workload.table_dir;
  co.shard_map_path = dep->shard_map_path();
  for (const std::string& a : dep->addresses()) co.shard_addresses.push_back({a});
  co.channels_per_replica = absl::GetFlag(FLAGS_channels_per_replica);
  co.max_rows_per_rpc = absl::GetFlag(FLAGS_max_rows_per_rpc);
  co.http2_bdp_probe = absl::GetFlag(FLAGS_http2_bdp_probe);
  co.transport =
      absl::GetFlag(FLAGS_transport) == "grpc" ? Transport::kGrpc : Transport::kRowStream;
  co.worker_cache_bytes = worker_cache_bytes;
  if (co.worker_cache_bytes > 0) co.worker_cache_profiles = dep->hot_profiles();
  co.block_time = spec.block;  // the loop's: each layer's need-by on the shards
  ASSIGN_OR_RETURN(std::unique_ptr<EngramClient> client, EngramClient::Create(co));
  ASSIGN_OR_RETURN(TierRows before, dep->Tiers());

  RunOutcome out;
  out.spec = spec;
  out.worker_cache_bytes = client->worker_cache_bytes();
  InferenceLoopOptions lo;
  lo.trace = &env.trace;
  lo.batch = absl::GetFlag(FLAGS_batch);
  lo.prefill = absl::GetFlag(FLAGS_prefill);
  lo.prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  lo.decode_steps = spec.decode_steps;
  lo.blocks = absl::GetFlag(FLAGS_blocks);
  lo.block_time = spec.block;
  lo.format = env.format;
  lo.realtime = absl::GetFlag(FLAGS_realtime_loop);
  lo.verify_per_layer = absl::GetFlag(FLAGS_verify_per_layer);
  lo.verify_table = env.table.get();
  lo.measure_skew = spec.measure_skew;
  lo.max_run_time = absl::Seconds(absl::GetFlag(FLAGS_max_run_seconds));
  double shard_cpu0 = dep->cpu_seconds();
  const int prefill_chunks = PrefillChunks(lo);
  lo.progress = [&](int done, int) {  // the decode steps start after the prefill's chunks
    if (prefill_chunks > 0 && done == prefill_chunks) shard_cpu0 = dep->cpu_seconds();
  };
  ASSIGN_OR_RETURN(InferenceLoopResult r, RunInferenceLoop(*client, lo));
  out.loop = std::move(r);
  out.shard_cpu_seconds = dep->cpu_seconds() - shard_cpu0;
  ASSIGN_OR_RETURN(TierRows after, dep->Tiers());
  out.tiers = {after.pinned - before.pinned, after.cached - before.cached,
               after.disk - before.disk};
  out.hot_bytes = dep->hot_bytes();
  return out;
}

absl::StatusOr<Env> MakeEnv() {
  Env env;
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format == "raw") {
    env.format = RowFormat::kRaw;
  } else if (format == "f32") {
    env.format = RowFormat::kF32;
  } else if (format != "bf16") {
    return absl::InvalidArgumentError("--format must be bf16, f32 or raw (got '" + format + "')");
  }
  if (absl::GetFlag(FLAGS_hot_cache_share) < -1 || absl::GetFlag(FLAGS_hot_cache_share) > 100) {
    return absl::InvalidArgumentError(
        "--hot-cache-share must be -1 (the server's default) or 0..100");
  }
  const std::string transport = absl::GetFlag(FLAGS_transport);
  if (transport != "row_stream" && transport != "grpc") {
    return absl::InvalidArgumentError("--transport must be row_stream or grpc (got '" + transport +
                                      "')");
  }
  absl::StatusOr<TailFormat> tail = ParseTailFormat(absl::GetFlag(FLAGS_tail_format));
  if (!tail.ok())
    return absl::InvalidArgumentError(absl::StrCat("--tail-format: ", tail.status().message()));
  env.tail_format = *tail;
  const std::string bin = BinDir();
  const std::string build = fs::path(bin).parent_path().string();
  WorkloadOptions wo;
  wo.work_dir = absl::GetFlag(FLAGS_work_dir).empty() ? build + "/bench-client"
                                                      : absl::GetFlag(FLAGS_work_dir);
  wo.trace = absl::GetFlag(FLAGS_trace);
  wo.token_map = absl::GetFlag(FLAGS_token_map);
  wo.demo_dir = build + "/demo";
  wo.source_dir = ENGRAM_SOURCE_DIR;
  wo.engram_vocab_size = absl::GetFlag(FLAGS_vocab);
  absl::StatusOr<RowEncoding> encoding = ParseRowEncoding(absl::GetFlag(FLAGS_encoding));
  if (!encoding.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--encoding: ", encoding.status().message()));
  }
  wo.encoding = *encoding;
  ASSIGN_OR_RETURN(Workload w, PrepareWorkload(wo));
  env.workload = std::move(w);
  env.shard_binary = absl::GetFlag(FLAGS_shard_binary).empty() ? bin + "/engram-shard"
                                                               : absl::GetFlag(FLAGS_shard_binary);
  if (access(env.shard_binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("no engram-shard at ", env.shard_binary,
                                            "; build it or pass --shard-binary PATH"));
  }
  env.log_dir = wo.work_dir;
  ASSIGN_OR_RETURN(std::unique_ptr<TableReader> table, TableReader::Open(env.workload.table_dir));
  env.table = std::move(table);
  for (const LayerInfo& l : env.table->manifest().layers) {
    env.table_bytes += l.rows * static_cast<uint64_t>(l.row_bytes);
  }
  ASSIGN_OR_RETURN(TokenTrace trace, TokenTrace::Load(env.workload.workload_trace));
  env.trace = std::move(trace);
  return env;
}

// The runs, in order: per shard count, each --block-us; then each local
// cache size on the largest shard count at the simulated block times.
absl::StatusOr<std::vector<RunSpec>> Plan() {
  absl::StatusOr<std::vector<double>> shards = ParseList("shards", absl::GetFlag(FLAGS_shards));
  if (!shards.ok()) return shards.status();
  ASSIGN_OR_RETURN(std::vector<double> block_us,
                   ParseList("block_us", absl::GetFlag(FLAGS_block_us)));
  ASSIGN_OR_RETURN(std::vector<double> caches,
                   ParseList("local_cache_pcts", absl::GetFlag(FLAGS_local_cache_pcts)));
  int most = 0;
  for (double s : *shards) {
    if (s < 1 || s != static_cast<int>(s)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--shards: ", s, " is not a whole count >= 1"));
    }
    most = std::max(most, static_cast<int>(s));
  }
  auto steps = [](double us) {
    return us == 0 ? absl::GetFlag(FLAGS_closed_loop_steps)
                   : static_cast<int>(absl::GetFlag(FLAGS_step_ms_total) * 1000.0 /
                                      (us * absl::GetFlag(FLAGS_blocks)));
  };
  std::vector<RunSpec> plan;
  for (double s : *shards) {
    for (double us : block_us) {
      // The traffic's skew is counted once: on the headline configuration.
      const bool skew = s == most && us == block_us.back();
      plan.push_back({static_cast<int>(s), absl::Microseconds(us), steps(us), 0, skew});
    }
  }
  for (double pct : caches) {
    for (double us : block_us) {
      if (pct > 0 && us > 0) plan.push_back({most, absl::Microseconds(us), steps(us), pct, false});
    }
  }
  return plan;
}

int RunTiers() {
  absl::SetFlag(&FLAGS_vocab, absl::GetFlag(FLAGS_tiers_vocab));
  absl::StatusOr<std::vector<double>> pcts =
      ParseList("tiers_budget_pcts", absl::GetFlag(FLAGS_tiers_budget_pcts));
  if (!pcts.ok()) return Fail(std::string(pcts.status().message()));
  absl::StatusOr<std::vector<double>> block_us =
      ParseList("block_us", absl::GetFlag(FLAGS_block_us));
  if (!block_us.ok()) return Fail(std::string(block_us.status().message()));
  absl::StatusOr<Env> env = MakeEnv();
  if (!env.ok()) return Fail(std::string(env.status().message()));
  TiersOptions o;
  o.workload = env->workload;
  o.trace = &env->trace;
  o.table = env->table.get();
  o.shard_binary = env->shard_binary;
  o.log_dir = env->log_dir;
  o.budget_pcts = *pcts;
  o.block_times.clear();
  for (double us : *block_us) {
    if (us > 0) o.block_times.push_back(absl::Microseconds(us));
  }
  o.decode_steps = absl::GetFlag(FLAGS_tiers_steps);
  o.shards = absl::GetFlag(FLAGS_tiers_shards);
  o.run_target_budgets = absl::GetFlag(FLAGS_tiers_target_budgets);
  if (o.shards < 1 || o.shards > 16) return Fail("--tiers-shards must be in 1..16");
  o.batch = absl::GetFlag(FLAGS_batch);
  o.blocks = absl::GetFlag(FLAGS_blocks);
  o.format = env->format;
  o.realtime = absl::GetFlag(FLAGS_realtime_loop);
  o.overhead_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_tiers_overhead_mb)) << 20;
  if (absl::GetFlag(FLAGS_shard_reader_threads) > 0) {
    o.reader_threads = absl::GetFlag(FLAGS_shard_reader_threads);
  }
  const absl::Status s = RunTableOverRam(o);
  if (!s.ok()) return Fail(absl::StrCat("table-over-ram: ", s.message()));
  return 0;
}

int Run() {
  testing::InstallChildCleanup();
  if (absl::GetFlag(FLAGS_table_over_ram)) return RunTiers();
  absl::StatusOr<std::vector<RunSpec>> plan = Plan();
  if (!plan.ok()) return Fail(std::string(plan.status().message()));
  absl::StatusOr<Env> env = MakeEnv();
  if (!env.ok()) return Fail(std::string(env.status().message()));
  const double load = LoadAverage();
  if (load > 0.5) {
    std::fprintf(stderr,
                 "bench-client: the load average is %.2f: something else is using the "
                 "CPUs, the figures will show it\n",
                 load);
  }
  std::vector<RunOutcome> outcomes;
  const absl::Time start = absl::Now();
  for (const RunSpec& spec : *plan) {
    std::fprintf(stderr, "bench-client: %s\n", Describe(spec).c_str());
    absl::StatusOr<RunOutcome> o = RunOne(*env, spec);
    if (!o.ok()) return Fail(absl::StrCat(Describe(spec), ": ", o.status().message()));
    outcomes.push_back(*std::move(o));
  }
  ReportSetup report;
  report.workload = env->workload.description;
  report.table_rows = 0;
  for (const LayerInfo& l : env->table->manifest().layers) report.table_rows += l.rows;
  report.table_bytes = env->table_bytes;
  report.vocab = absl::GetFlag(FLAGS_vocab);
  report.hot_pct = absl::GetFlag(FLAGS_hot_pct);
  report.tail_format = absl::StrCat(TailFormatName(env->tail_format), " tail",
                                    env->tail_format == TailFormat::kBlock ? " (O_DIRECT)" : "");
  report.http2_bdp_probe = absl::GetFlag(FLAGS_http2_bdp_probe);
  report.transport = absl::GetFlag(FLAGS_transport);
  report.hot_cache_share = absl::GetFlag(FLAGS_hot_cache_share) >= 0
                               ? absl::GetFlag(FLAGS_hot_cache_share)
                               : static_cast<int>(kHotTierCacheSharePercent);
  report.layer_blocks = env->table->manifest().layout.engram_layer_ids;
  report.blocks = absl::GetFlag(FLAGS_blocks);
  report.batch = absl::GetFlag(FLAGS_batch);
  report.prefill = absl::GetFlag(FLAGS_prefill);
  report.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  report.load_average = load;
  PrintReport(report, outcomes);
  for (const RunOutcome& o : outcomes) {
    if (o.loop.wrong > 0)
      return Fail(absl::StrCat(Describe(o.spec), ": ", o.loop.wrong, " wrong rows"));
  }
  return 0;
}

}  // namespace
}  // namespace engram::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "engram-bench-client [--work-dir DIR] [--shards 1,2,3] [--hot-pct 10] ...\n"
      "The client library end to end against engram-shard processes on 127.0.0.1.\n"
      "Flags may be spelled with dashes or underscores.");
  engram::ParseFlags(argc, argv);
  return engram::bench::Run();
}

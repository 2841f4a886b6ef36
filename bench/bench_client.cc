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
// (ClientOptions::local_cache_bytes) at --local-cache-pcts of the table.
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
#include "bench/bench_client_report.h"
#include "bench/bench_client_setup.h"
#include "bench/bench_client_shards.h"
#include "client/engram_client.h"
#include "common/table.h"
#include "tools/demo/inference_loop.h"

ABSL_FLAG(std::string, work_dir, "", "cache of traces, tables and shards (default BUILD/bench-client)");
ABSL_FLAG(std::string, trace, "", "token trace (default: real text, see bench_client_setup.h)");
ABSL_FLAG(std::string, token_map, "", "token map for a --trace (default: none)");
ABSL_FLAG(int64_t, vocab, 20000, "engram_vocab_size of the v41 table");
ABSL_FLAG(std::string, shards, "1,2,3", "shard counts to run");
ABSL_FLAG(double, hot_pct, 10, "hot tier of each shard, percent of its rows' bytes");
ABSL_FLAG(std::string, local_cache_pcts, "1,5", "worker-side cache sizes, percent of the table");
ABSL_FLAG(int32_t, batch, 64, "sequences per step");
ABSL_FLAG(int32_t, prefill, 128, "prefill tokens per sequence");
ABSL_FLAG(int32_t, blocks, 40, "simulated transformer blocks per step");
ABSL_FLAG(int32_t, closed_loop_steps, 400, "decode steps of a closed-loop run");
ABSL_FLAG(int32_t, steps_100us, 750, "decode steps of a 100 us/block run (4 ms steps)");
ABSL_FLAG(int32_t, steps_500us, 250, "decode steps of a 500 us/block run (20 ms steps)");
ABSL_FLAG(int32_t, verify_per_layer, 16, "rows verified per layer per step");
ABSL_FLAG(int32_t, max_run_seconds, 30, "a run's decode steps stop after this long");
ABSL_FLAG(std::string, shard_binary, "", "engram-shard (default: next to this binary)");

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

absl::StatusOr<std::vector<double>> ParseList(const std::string& flag, const std::string& text) {
  std::vector<double> out;
  for (absl::string_view s : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    double v;
    if (!absl::SimpleAtod(s, &v) || v < 0) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", std::string(s),
                                                     "' is not a non-negative number"));
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
};

absl::StatusOr<RunOutcome> RunOne(const Env& env, const RunSpec& spec) {
  absl::StatusOr<std::vector<std::string>> dirs = PrepareShards(env.workload, spec.shards);
  if (!dirs.ok()) return dirs.status();
  Deployment::Options d;
  d.binary = env.shard_binary;
  d.shard_dirs = *dirs;
  d.hot_share = absl::GetFlag(FLAGS_hot_pct) / 100.0;
  d.log_dir = env.log_dir;
  absl::StatusOr<std::unique_ptr<Deployment>> dep = Deployment::Start(d);
  if (!dep.ok()) return dep.status();

  ClientOptions co;
  co.table_dir = env.workload.table_dir;
  co.shard_map_path = (*dep)->shard_map_path();
  for (const std::string& a : (*dep)->addresses()) co.shard_addresses.push_back({a});
  co.local_cache_bytes =
      static_cast<uint64_t>(spec.local_cache_pct / 100.0 * static_cast<double>(env.table_bytes));
  if (co.local_cache_bytes > 0) co.local_cache_profiles = (*dep)->hot_profiles();
  absl::StatusOr<std::unique_ptr<EngramClient>> client = EngramClient::Create(co);
  if (!client.ok()) return client.status();
  absl::StatusOr<TierRows> before = (*dep)->Tiers();
  if (!before.ok()) return before.status();

  RunOutcome out;
  out.spec = spec;
  out.local_cache_bytes = (*client)->local_cache_bytes();
  InferenceLoopOptions lo;
  lo.trace = &env.trace;
  lo.batch = absl::GetFlag(FLAGS_batch);
  lo.prefill = absl::GetFlag(FLAGS_prefill);
  lo.decode_steps = spec.decode_steps;
  lo.blocks = absl::GetFlag(FLAGS_blocks);
  lo.block_time = spec.block;
  lo.verify_per_layer = absl::GetFlag(FLAGS_verify_per_layer);
  lo.verify_table = env.table.get();
  lo.measure_skew = spec.measure_skew;
  lo.max_run_time = absl::Seconds(absl::GetFlag(FLAGS_max_run_seconds));
  double shard_cpu0 = (*dep)->cpu_seconds();
  const bool has_prefill = lo.prefill > 0;
  lo.progress = [&](int done, int) {  // the decode steps start after step 1
    if (has_prefill && done == 1) shard_cpu0 = (*dep)->cpu_seconds();
  };
  absl::StatusOr<InferenceLoopResult> r = RunInferenceLoop(**client, lo);
  if (!r.ok()) return r.status();
  out.loop = *std::move(r);
  out.shard_cpu_seconds = (*dep)->cpu_seconds() - shard_cpu0;
  absl::StatusOr<TierRows> after = (*dep)->Tiers();
  if (!after.ok()) return after.status();
  out.tiers = {after->pinned - before->pinned, after->cached - before->cached,
               after->disk - before->disk};
  out.hot_bytes = (*dep)->hot_bytes();
  return out;
}

absl::StatusOr<Env> MakeEnv() {
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
  absl::StatusOr<Workload> w = PrepareWorkload(wo);
  if (!w.ok()) return w.status();
  Env env;
  env.workload = *std::move(w);
  env.shard_binary = absl::GetFlag(FLAGS_shard_binary).empty() ? bin + "/engram-shard"
                                                               : absl::GetFlag(FLAGS_shard_binary);
  if (access(env.shard_binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("no engram-shard at ", env.shard_binary,
                                            "; build it or pass --shard-binary PATH"));
  }
  env.log_dir = wo.work_dir;
  absl::StatusOr<std::unique_ptr<TableReader>> table = TableReader::Open(env.workload.table_dir);
  if (!table.ok()) return table.status();
  env.table = *std::move(table);
  for (const LayerInfo& l : env.table->manifest().layers) {
    env.table_bytes += l.rows * static_cast<uint64_t>(l.row_bytes);
  }
  absl::StatusOr<TokenTrace> trace = TokenTrace::Load(env.workload.workload_trace);
  if (!trace.ok()) return trace.status();
  env.trace = *std::move(trace);
  return env;
}

// The runs, in order: per shard count closed loop, 100 us, 500 us; then the
// local cache sizes on the largest shard count.
absl::StatusOr<std::vector<RunSpec>> Plan() {
  absl::StatusOr<std::vector<double>> shards = ParseList("shards", absl::GetFlag(FLAGS_shards));
  if (!shards.ok()) return shards.status();
  absl::StatusOr<std::vector<double>> caches =
      ParseList("local_cache_pcts", absl::GetFlag(FLAGS_local_cache_pcts));
  if (!caches.ok()) return caches.status();
  std::vector<RunSpec> plan;
  int most = 0;
  for (double s : *shards) {
    const int n = static_cast<int>(s);
    if (n < 1 || n != s) return absl::InvalidArgumentError("--shards: counts must be whole, >= 1");
    most = std::max(most, n);
    plan.push_back({n, absl::ZeroDuration(), absl::GetFlag(FLAGS_closed_loop_steps), 0, false});
    plan.push_back({n, absl::Microseconds(100), absl::GetFlag(FLAGS_steps_100us), 0, false});
    plan.push_back({n, absl::Microseconds(500), absl::GetFlag(FLAGS_steps_500us), 0, true});
  }
  for (double pct : *caches) {
    if (pct <= 0) continue;
    plan.push_back({most, absl::Microseconds(100), absl::GetFlag(FLAGS_steps_100us), pct, false});
    plan.push_back({most, absl::Microseconds(500), absl::GetFlag(FLAGS_steps_500us), pct, false});
  }
  return plan;
}

int Run() {
  InstallChildCleanup();
  absl::StatusOr<std::vector<RunSpec>> plan = Plan();
  if (!plan.ok()) return Fail(std::string(plan.status().message()));
  absl::StatusOr<Env> env = MakeEnv();
  if (!env.ok()) return Fail(std::string(env.status().message()));
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
  report.layer_blocks = env->table->manifest().layout.engram_layer_ids;
  report.blocks = absl::GetFlag(FLAGS_blocks);
  report.batch = absl::GetFlag(FLAGS_batch);
  report.prefill = absl::GetFlag(FLAGS_prefill);
  report.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  PrintReport(report, outcomes);
  for (const RunOutcome& o : outcomes) {
    if (o.loop.wrong > 0) return Fail(absl::StrCat(Describe(o.spec), ": ", o.loop.wrong, " wrong rows"));
  }
  return 0;
}

}  // namespace
}  // namespace engram::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "engram-bench-client [--work-dir DIR] [--shards 1,2,3] [--hot-pct 10] ...\n"
      "The client library end to end against engram-shard processes on 127.0.0.1.");
  // Accept --work-dir as --work_dir, as engram-shard does.
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--", 2) != 0 || argv[i][2] == '\0') continue;
    for (char* p = argv[i] + 2; *p != '\0' && *p != '='; ++p) {
      if (*p == '-') *p = '_';
    }
  }
  absl::ParseCommandLine(argc, argv);
  return engram::bench::Run();
}

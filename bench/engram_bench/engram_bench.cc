// engram-bench: engram-store and its peers side by side in one run, on the
// same row ids (docs/benchmarks.md, "Side by side (engram-bench)").
//
//   engram-bench [--quick] [--tokens real|zipf] [--doc docs/benchmarks.md]
//                [--plot-data FILE] [--duration 3s] [--rounds 4] ...
//   engram-bench --self-check
//
// Id streams: tokens (real English text by default, or Zipf) hashed by the
// client's NgramHasher into row ids, as decode steps of 1, 64 and 256
// sequences and as prefill chunks of 2,048 tokens. Tables: v41 (264-byte
// rows) and small (66-byte rows) held in RAM, and a v41 table with the
// shard's hot tier at 0 and at half the table, --direct-io, so the tail
// comes off disk. Systems, on the same ids in the same run: engram-store
// (1 and 3 engram-shard processes through EngramClient), Redis (MGET via
// hiredis), RocksDB MultiGet in process on the same shard files, a memory
// gather, the bare TCP exchange, and raw O_DIRECT reads at queue depths 1,
// 16, 32 and 64; and, as diagnostics, engram-shard through one bare gRPC
// call per step (no client library) and through the client library with
// its default ClientOptions::pipeline_layers (ours turns it off: a closed
// loop wants every layer at once). The machine's absolute figures swing
// 2-3x between runs, so the targets are ratios of systems measured in
// alternating rounds.
//
// --quick runs the headline comparison only (v41 in RAM, decode B=256, one
// shard, one connection; then the same table's tail off disk) in under 3
// minutes, on the full run's in-RAM table (built in well under a minute).
// Either way the last line is
//   bench: redis_ratio=R tcp_ratio=T disk_ratio=D wire_bytes_per_row=W
// --self-check only checks that every system returns the right bytes.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/common/bench_client_shards.h"
#include "bench/engram_bench/engram_bench_measure.h"
#include "bench/engram_bench/engram_bench_report.h"
#include "bench/engram_bench/engram_bench_selfcheck.h"
#include "bench/engram_bench/engram_bench_systems.h"
#include "bench/engram_bench/engram_bench_tables.h"
#include "common/util/flags.h"
#include "common/util/status_macros.h"

ABSL_FLAG(bool, quick, false, "the headline comparison only, in under 3 minutes");
ABSL_FLAG(bool, self_check, false, "check every system's bytes on a tiny table, no timing");
ABSL_FLAG(std::string, work_dir, "",
          "cache of traces, tables and shards (default BUILD/engram-bench)");
ABSL_FLAG(std::string, tokens, "real", "token source: real (English text) or zipf");
ABSL_FLAG(double, zipf_exponent, 1.1, "exponent of --tokens zipf (1.0 to 1.2)");
ABSL_FLAG(int64_t, hot_vocab, 20000,
          "engram_vocab_size of the in-RAM tables, and of --quick's (v41: 0.97M rows, 256 MB)");
ABSL_FLAG(int64_t, disk_vocab, 40000,
          "engram_vocab_size of the on-disk table (v41: 1.9M rows, 513 MB)");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(3),
          "measured time per system and configuration, over all rounds");
ABSL_FLAG(absl::Duration, warmup, absl::Milliseconds(300), "unmeasured time per system first");
ABSL_FLAG(int32_t, rounds, 4, "alternating rounds of the systems compared with each other");
ABSL_FLAG(uint64_t, max_requests, 100000, "step cap per system and configuration");
ABSL_FLAG(std::string, disk_queue_depths, "1,16,32,64", "threads of the raw O_DIRECT reads");
ABSL_FLAG(uint64_t, redis_mget_keys, 16384, "keys per MGET (a layer's distinct rows per step fit)");
ABSL_FLAG(std::string, shard_binary, "", "engram-shard (default: next to this binary)");
ABSL_FLAG(std::string, redis_server, "/usr/bin/redis-server", "the redis-server executable");
ABSL_FLAG(std::string, doc, "",
          "Markdown file whose section \"Side by side (engram-bench)\" to rewrite");
ABSL_FLAG(std::string, plot_data, "", "where to write the data of the batch-size plot");
ABSL_FLAG(std::string, only, "",
          "run only the systems whose names contain one of these (comma list; for profiling)");
ABSL_FLAG(std::string, plot_png, "bench_batch.png", "the plot's path as the doc links to it");

namespace engram::bench {
namespace {

namespace fs = std::filesystem;

// One table and what runs on it.
struct TablePlan {
  std::string label = "";
  TableSpec spec = {};
  bool on_disk = false;      // tail configurations instead of the in-RAM ones
  bool half_in_ram = false;  // on disk: also a hot tier of half the table
  bool diagnostics = false;  // in RAM: also the bare gRPC call and pipelined layers
  std::vector<StreamSpec> streams = {};
  std::vector<int> connections = {1};
  std::vector<int> queue_depths = {};  // on disk: raw O_DIRECT reads
};

StreamSpec Decode(int batch) {
  StreamSpec s;
  s.batch = batch;
  return s;
}

StreamSpec PrefillChunk(int tokens) {
  StreamSpec s;
  s.batch = 1;
  s.tokens = tokens;
  s.steps = 64;
  return s;
}

absl::StatusOr<std::vector<int>> ParseInts(const std::string& flag, const std::string& text) {
  std::vector<int> out;
  for (absl::string_view piece : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    const std::string part(piece);
    int v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", part, "' is not a whole number >= 1"));
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<std::vector<TablePlan>> Plan(const TableSpec& tokens) {
  ASSIGN_OR_RETURN(std::vector<int> qd,
                   ParseInts("disk_queue_depths", absl::GetFlag(FLAGS_disk_queue_depths)));
  if (std::find(qd.begin(), qd.end(), kHeadlineQueueDepth) == qd.end()) {
    qd.push_back(kHeadlineQueueDepth);  // the target's ceiling
  }
  std::vector<TablePlan> plan;
  TableSpec t = tokens;
  t.vocab = absl::GetFlag(FLAGS_hot_vocab);  // --quick's table is the full run's too
  if (absl::GetFlag(FLAGS_quick)) {
    plan.push_back(
        {.label = "v41, in RAM", .spec = t, .diagnostics = true, .streams = {Decode(256)}});
    plan.push_back({.label = "v41, on disk",
                    .spec = t,
                    .on_disk = true,
                    .streams = {Decode(256)},
                    .queue_depths = {kHeadlineQueueDepth}});
    return plan;
  }
  t.three_shards = true;
  plan.push_back({.label = "v41, in RAM",
                  .spec = t,
                  .diagnostics = true,
                  .streams = {Decode(1), Decode(64), Decode(256), PrefillChunk(2048)},
                  .connections = {1, 2}});
  TableSpec small = t;
  small.preset = "small";
  small.three_shards = false;
  plan.push_back({.label = "small, in RAM", .spec = small, .streams = {Decode(64), Decode(256)}});
  TableSpec disk = t;
  disk.vocab = absl::GetFlag(FLAGS_disk_vocab);
  disk.three_shards = false;
  plan.push_back({.label = "v41, on disk",
                  .spec = disk,
                  .on_disk = true,
                  .half_in_ram = true,
                  .streams = {Decode(256)},
                  .queue_depths = qd});
  return plan;
}

std::string Mb(uint64_t bytes) {
  return absl::StrFormat("%.0f MB", static_cast<double>(bytes) / 1e6);
}

// Whether --only lets `name` run.
bool Wanted(const std::string& name) {
  const std::string only = absl::GetFlag(FLAGS_only);
  if (only.empty()) return true;
  for (absl::string_view part : absl::StrSplit(only, ',', absl::SkipEmpty())) {
    if (absl::StrContains(name, part)) return true;
  }
  return false;
}

// The systems of one table: ours first, then the peers.
absl::StatusOr<std::vector<std::unique_ptr<BenchSystem>>> StartSystems(const BenchEnv& env,
                                                                       const TablePlan& plan,
                                                                       const BenchData& d) {
  using Starter = std::function<absl::StatusOr<std::unique_ptr<BenchSystem>>()>;
  std::vector<std::pair<std::string, Starter>> candidates;
  auto engram = [&](const std::string& name, const std::vector<std::string>& dirs, double hot_share,
                    bool pipeline_layers = false, bool tls = false) {
    candidates.emplace_back(name, [&env, &plan, &d, name, &dirs, hot_share, pipeline_layers, tls] {
      EngramSystemOptions o;
      o.name = name;
      o.shard_binary = env.shard_binary;
      o.table_dir = d.workload.table_dir;
      o.shard_dirs = dirs;
      o.hot_share = hot_share;
      o.direct_io = plan.on_disk;
      o.pipeline_layers = pipeline_layers;
      o.log_dir = env.work_dir;
      if (tls) o.tls_dir = env.work_dir + "/tls";
      return StartEngram(o);
    });
  };
  if (plan.on_disk) {
    engram(kOursTail, d.one_shard, 0);
    if (plan.half_in_ram) engram("engram 1 shard, 1/2 in RAM", d.one_shard, 0.5);
    candidates.emplace_back("rocksdb in process, direct I/O", [&d] {
      return OpenRocksDb("rocksdb in process, direct I/O", d.one_shard[0], true);
    });
  } else {
    engram(kOursOneShard, d.one_shard, 1.0);
    // The same over TLS (gRPC and the row stream), in the same run.
    engram(kOursTls, d.one_shard, 1.0, /*pipeline_layers=*/false, /*tls=*/true);
    if (!d.three_shards.empty()) engram("engram 3 shards", d.three_shards, 1.0);
    if (plan.diagnostics) {
      // The library's default, which holds layer l + 1 back until layer l
      // has arrived: the full run only.
      if (!absl::GetFlag(FLAGS_quick)) {
        engram(kOursPipelined, d.one_shard, 1.0, /*pipeline_layers=*/true);
      }
      candidates.emplace_back(kRawGrpc, [&env, &d] {
        EngramSystemOptions o;
        o.name = kRawGrpc;
        o.shard_binary = env.shard_binary;
        o.shard_dirs = d.one_shard;
        o.log_dir = env.work_dir;
        return StartRawGrpc(o, d.map.row_bytes[0]);
      });
    }
    candidates.emplace_back(kRedis, [&env, &d] {
      std::fprintf(stderr, "engram-bench: loading %llu rows into redis\n",
                   static_cast<unsigned long long>(d.table_rows));
      RedisServerOptions redis;
      redis.binary = env.redis_binary;
      redis.work_dir = env.work_dir;
      return StartRedis(redis, d.rows, d.map.layer_rows, absl::GetFlag(FLAGS_redis_mget_keys));
    });
    candidates.emplace_back(kBareTcp, [&d] { return StartTcp(d.rows, d.map.layer_rows); });
    candidates.emplace_back(kMemoryGather, [&d]() -> absl::StatusOr<std::unique_ptr<BenchSystem>> {
      return NewMemoryGather(d.rows);
    });
    candidates.emplace_back("rocksdb in process", [&d] {
      return OpenRocksDb("rocksdb in process", d.one_shard[0], false);
    });
  }
  std::vector<std::unique_ptr<BenchSystem>> systems;
  for (const auto& [name, start] : candidates) {
    if (!Wanted(name)) continue;
    std::fprintf(stderr, "engram-bench: starting %s (%s)\n", name.c_str(), plan.label.c_str());
    absl::StatusOr<std::unique_ptr<BenchSystem>> s = start();
    if (!s.ok())
      return absl::Status(s.status().code(), absl::StrCat(name, ": ", s.status().message()));
    systems.push_back(*std::move(s));
  }
  return systems;
}

absl::Status RunTable(const BenchEnv& env, const TablePlan& plan, const RoundLimits& limits,
                      Report* report) {
  std::fprintf(stderr, "engram-bench: preparing %s (%s, engram_vocab_size %lld)\n",
               plan.label.c_str(), plan.spec.preset.c_str(),
               static_cast<long long>(plan.spec.vocab));
  ASSIGN_OR_RETURN(std::unique_ptr<BenchData> data, PrepareBenchData(env, plan.spec));
  const BenchData& d = *data;
  report->setup.push_back(absl::StrFormat(
      "%s: %s preset, engram_vocab_size %d, %d rows x %d B = %s; %s", plan.label, plan.spec.preset,
      plan.spec.vocab, d.table_rows, d.map.row_bytes[0], Mb(d.table_bytes),
      plan.on_disk ? absl::StrCat("engram-shard --direct-io, no RocksDB block cache, a hot tier "
                                  "of 0 (tail)",
                                  plan.half_in_ram ? " and of half the table" : "")
                   : absl::StrCat("hot tier = the whole shard; ",
                                  d.three_shards.empty() ? "1 shard" : "1 and 3 shards")));
  if (report->workload_line.empty()) report->workload_line = d.workload.description;

  absl::StatusOr<std::vector<std::unique_ptr<BenchSystem>>> systems = StartSystems(env, plan, d);
  if (!systems.ok()) return systems.status();
  // The raw O_DIRECT ceiling runs between the rounds of the first stream's
  // systems, so that it alternates with what it is compared with.
  std::vector<Measurement> raw(plan.queue_depths.size());
  RoundLimits raw_round = limits;
  raw_round.duration = limits.duration / std::max(1, limits.rounds);
  const std::function<absl::Status()> raw_reads = [&]() -> absl::Status {
    for (size_t k = 0; k < raw.size(); ++k) {
      ASSIGN_OR_RETURN(Measurement m,
                       MeasureRawDisk(plan.label, d.sst_files, plan.queue_depths[k], raw_round));
      if (raw[k].system.empty()) {
        raw[k] = std::move(m);
      } else {
        raw[k].loop.Merge(m.loop);
      }
    }
    return absl::OkStatus();
  };
  bool first = true;
  for (const StreamSpec& spec : plan.streams) {
    ASSIGN_OR_RETURN(StepStream stream, StepStream::Build(d.trace, *d.hasher, spec));
    report->shapes.push_back({plan.label, stream.name(), MeasureShape(stream, d.table_rows)});
    for (int connections : plan.connections) {
      std::vector<BenchSystem*> chosen;
      for (const auto& s : *systems) {
        // Two connections: ours (one shard) and the peers over a wire.
        if (connections == 1 || s->name() == kOursOneShard || s->name() == kRawGrpc ||
            s->name() == kRedis || s->name() == kBareTcp) {
          chosen.push_back(s.get());
        }
      }
      const bool with_raw = first && !raw.empty();
      first = false;
      std::fprintf(stderr, "engram-bench: %s, %s, %d connection%s: %zu systems%s\n",
                   plan.label.c_str(), stream.name().c_str(), connections,
                   connections == 1 ? "" : "s", chosen.size(),
                   with_raw ? " and the raw O_DIRECT reads" : "");
      ASSIGN_OR_RETURN(std::vector<Measurement> m,
                       MeasureSystems(plan.label, chosen, stream, connections, d.rows, limits,
                                      with_raw ? raw_reads : nullptr));
      report->rows.insert(report->rows.end(), m.begin(), m.end());
    }
  }
  for (Measurement& m : raw) {
    if (!m.system.empty()) report->rows.push_back(std::move(m));  // measured
  }
  if (plan.label == report->hot_table) report->headline_row_bytes = d.map.row_bytes[0];
  return absl::OkStatus();
}

std::string CommandLine(const BenchEnv& env, int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    const std::string root = env.source_dir + "/";
    for (size_t at; (at = a.find(root)) != std::string::npos;) a.erase(at, root.size());
    args.push_back(a);
  }
  return absl::StrJoin(args, " ");
}

double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double load = 0;
  in >> load;
  return load;
}

absl::StatusOr<TableSpec> TokenSource(const BenchEnv& env) {
  TableSpec t;
  const std::string tokens = absl::GetFlag(FLAGS_tokens);
  if (tokens == "real") return t;
  const double exponent = absl::GetFlag(FLAGS_zipf_exponent);
  if (tokens != "zipf" || exponent < 1.0 || exponent > 1.2) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tokens ", tokens, " --zipf-exponent ", exponent,
                     ": use --tokens real, or --tokens zipf with an exponent in [1.0, 1.2]"));
  }
  t.trace = absl::StrFormat("%s/zipf-%.2f.trace", env.work_dir, exponent);
  if (!fs::exists(t.trace)) {
    RETURN_IF_ERROR(WriteZipfTrace(t.trace, 1024, 2048, exponent, 11));
  }
  return t;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "engram-bench: %s\n", std::string(s.message()).c_str());
  return 1;
}

int Run(int argc, char** argv) {
  testing::InstallChildCleanup();  // shard processes die with us; redis has PDEATHSIG
  BenchEnv env;
  env.source_dir = ENGRAM_SOURCE_DIR;
  std::error_code ec;
  const fs::path bin = fs::read_symlink("/proc/self/exe", ec).parent_path();
  env.build_dir = bin.parent_path().string();
  env.work_dir = absl::GetFlag(FLAGS_work_dir).empty() ? env.build_dir + "/engram-bench"
                                                       : absl::GetFlag(FLAGS_work_dir);
  env.shard_binary = absl::GetFlag(FLAGS_shard_binary).empty() ? (bin / "engram-shard").string()
                                                               : absl::GetFlag(FLAGS_shard_binary);
  env.redis_binary = absl::GetFlag(FLAGS_redis_server);
  for (const std::string& exe : {env.shard_binary, env.redis_binary}) {
    if (::access(exe.c_str(), X_OK) != 0) {
      return Fail(
          absl::NotFoundError(absl::StrCat("no executable ", exe,
                                           "; build engram-shard / install redis-server, or pass "
                                           "--shard-binary / --redis-server PATH")));
    }
  }
  if (absl::GetFlag(FLAGS_self_check)) return RunSelfCheck(env);
  fs::create_directories(env.work_dir, ec);
  absl::StatusOr<TableSpec> tokens = TokenSource(env);
  if (!tokens.ok()) return Fail(tokens.status());
  absl::StatusOr<std::vector<TablePlan>> plan = Plan(*tokens);
  if (!plan.ok()) return Fail(plan.status());

  RoundLimits limits;
  limits.duration = absl::GetFlag(FLAGS_duration);
  limits.warmup = absl::GetFlag(FLAGS_warmup);
  limits.rounds = absl::GetFlag(FLAGS_rounds);
  limits.max_requests = absl::GetFlag(FLAGS_max_requests);
  Report report;
  report.command = CommandLine(env, argc, argv);
  report.hot_table = plan->front().label;
  report.disk_table = plan->back().label;
  const absl::Time start = absl::Now();
  const double load = LoadAverage();
  for (const TablePlan& p : *plan) {
    if (absl::Status s = RunTable(env, p, limits, &report); !s.ok()) return Fail(s);
  }
  report.setup.insert(
      report.setup.begin(),
      {absl::StrFormat("machine: %u cores, 1-minute load average %.2f at the start; %s",
                       std::thread::hardware_concurrency(), load,
                       absl::FormatTime("%Y-%m-%d %H:%M UTC", start, absl::UTCTimeZone())),
       absl::StrCat("tokens: ", report.workload_line,
                    "; decode steps: 32 prefill tokens per sequence, then one token a step; "
                    "prefill chunks: the first 2,048 tokens of a new generation"),
       absl::StrFormat("timing: %s per system and configuration in %d alternating rounds "
                       "after %s of warm-up; every loop checks its last step's bytes",
                       absl::FormatDuration(limits.duration), limits.rounds,
                       absl::FormatDuration(limits.warmup))});
  report.setup.push_back(
      absl::StrFormat("run time: %.0f s", absl::ToDoubleSeconds(absl::Now() - start)));
  for (const std::string& line : report.setup) std::printf("%s\n", line.c_str());
  if (!absl::GetFlag(FLAGS_plot_data).empty()) {
    if (absl::Status s = WritePlotData(report, absl::GetFlag(FLAGS_plot_data)); !s.ok()) {
      return Fail(s);
    }
  }
  if (!absl::GetFlag(FLAGS_doc).empty()) {
    if (absl::Status s = WriteDocSection(absl::GetFlag(FLAGS_doc),
                                         MarkdownSection(report, absl::GetFlag(FLAGS_plot_png)));
        !s.ok()) {
      return Fail(s);
    }
  }
  PrintReport(report, stdout);  // its last line is the contract
  return 0;
}

}  // namespace
}  // namespace engram::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "engram-bench [--quick] [--tokens real|zipf] [--doc docs/benchmarks.md] ...\n"
      "engram-store and its peers side by side; see docs/benchmarks.md. Flags may be "
      "spelled with dashes or underscores.");
  std::vector<std::string> original(argv, argv + argc);  // before the flag rewrite
  std::vector<char*> original_ptrs;
  for (std::string& a : original) original_ptrs.push_back(a.data());
  const std::vector<char*> positional = engram::ParseFlags(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr,
                 "engram-bench: unexpected argument '%s' (flags start with --; see --help)\n",
                 positional[1]);
    return 2;
  }
  return engram::bench::Run(argc, original_ptrs.data());
}

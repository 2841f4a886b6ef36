// engram-bench-shard: one shard server's Lookup throughput and latency on
// loopback, each figure set against a ceiling measured in the same run (the
// machine's absolute figures swing 2-3x between runs; the ratios do not).
//
//   engram-bench-shard [--work-dir DIR] [--engram-vocab-size N]
//                      [--duration 5s] [--rounds 10] [--max-requests N]
//                      [--steps N] [--shard-binary PATH]
//
// Workload: v41 decode steps (256 sequences x 2 layers x 24 columns =
// 12,288 ids, 264-byte rows, ~3.2 MB per request) hashed from a Zipf(1.1)
// token stream, against one shard of a synthetic v41 table served by the
// engram-shard daemon as a child process. Configurations:
//
//   hot 100%  the row stream (the client library's default transport), and
//             for context gRPC raw ByteBuffers and the gRPC protobuf stub,
//             against the bare TCP exchange of the same bytes (ceiling,
//             tcp_exchange.h)
//   hot 10%   gRPC raw (hot tier pinned from the import's profile)
//   hot 0%    --direct-io, no block cache: gRPC raw with 1 and 2 client
//             threads, and 32 threads of O_DIRECT 4 KiB preads of the same
//             SST files (ceiling, raw_disk.h)
//
// Phases compared with each other run in alternating rounds, so a drift of
// the machine hits them alike. The last line is
//   bench-shard: hot_tcp_ratio=R hot_p99_ratio=P disk_ratio=D
// See docs/benchmarks.md, "Shard server".
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bench/common/raw_disk.h"
#include "bench/common/tcp_exchange.h"
#include "bench/shard/bench_shard_grpc.h"
#include "bench/shard/bench_shard_measure.h"
#include "bench/shard/bench_shard_stream.h"
#include "bench/shard/bench_shard_workload.h"
#include "common/util/flags.h"
#include "common/util/status_macros.h"
#include "shard/footprint.h"

ABSL_FLAG(std::string, work_dir, "/tmp/engram-bench-shard",
          "where the table's shard is built; reused when built with the "
          "same parameters");
ABSL_FLAG(int64_t, engram_vocab_size, 40000,
          "prime-walk base of the v41 table (40000: ~0.97M rows per layer, "
          "~510 MB)");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(5),
          "measured time per configuration, split over --rounds");
ABSL_FLAG(absl::Duration, warmup, absl::Milliseconds(500),
          "unmeasured time per configuration before it is measured");
ABSL_FLAG(int32_t, rounds, 10, "alternating rounds of the configurations compared with each other");
ABSL_FLAG(uint64_t, max_requests, 50000,
          "request cap per configuration (whichever of this and --duration "
          "ends first)");
ABSL_FLAG(int32_t, steps, 2048,
          "distinct decode steps hashed up front (~98 KB of ids each); the "
          "loops cycle through them");
ABSL_FLAG(std::string, shard_binary, "",
          "the engram-shard executable (default: next to this binary)");
ABSL_FLAG(int32_t, reader_threads, 32, "engram-shard --reader-threads");
ABSL_FLAG(int32_t, disk_threads, 32, "threads of the O_DIRECT read ceiling");
ABSL_FLAG(bool, proto, true, "also measure the generated protobuf stub");
ABSL_FLAG(std::string, configs, "hot,tenth,tail",
          "which configurations to run (for profiling one): hot = hot tier "
          "100%, tenth = 10%, tail = 0% with direct I/O");

namespace engram::bench {
namespace {

constexpr uint32_t kDiskBlock = 4096;

// Everything a fetcher needs about the workload. Outlives every phase.
struct Workload {
  BenchTable table;
  DecodeSteps steps;
  RowArray rows;
  size_t rows_bytes = 0;  // per request
};

// One measured configuration: how to run it for some limits, and what it
// accumulated over its rounds.
struct Phase {
  std::string config;
  std::string path;
  int clients = 1;
  double rows_per_request = 0;
  double bytes_per_row = 0;
  std::function<absl::StatusOr<LoopResult>(const LoopLimits&)> run;
  // The server's counters; empty when there is no server (the disk reads).
  std::function<absl::StatusOr<ServerCounters>()> counters;
  bool server_in_process = false;  // its CPU time is part of this process's

  LoopResult total;
  ServerCounters served;

  double rows_per_second() const { return total.requests_per_second() * rows_per_request; }
  double p99_us() const { return total.latency_us.Percentile(0.99); }
};

absl::Status RunPhase(Phase& phase, const LoopLimits& limits, bool record) {
  ServerCounters before;
  if (phase.counters && record) {
    ASSIGN_OR_RETURN(ServerCounters c, phase.counters());
    before = c;
  }
  absl::StatusOr<LoopResult> result = phase.run(limits);
  if (!result.ok()) {
    return absl::Status(result.status().code(), absl::StrCat(phase.config, " ", phase.path, ": ",
                                                             result.status().message()));
  }
  if (!record) return absl::OkStatus();
  if (phase.counters) {
    ASSIGN_OR_RETURN(ServerCounters after, phase.counters());
    phase.served += after - before;
  }
  phase.total.Merge(*result);
  return absl::OkStatus();
}

// Warms every phase up, then runs `rounds` rounds of all phases in turn,
// each round taking its share of the limits.
absl::Status Measure(const std::vector<Phase*>& phases, absl::Duration warmup, int rounds) {
  LoopLimits warm;
  warm.duration = warmup;
  for (Phase* p : phases) {
    RETURN_IF_ERROR(RunPhase(*p, warm, false));
  }
  LoopLimits round;
  round.duration = absl::GetFlag(FLAGS_duration) / rounds;
  round.max_requests = std::max<uint64_t>(1, absl::GetFlag(FLAGS_max_requests) / rounds);
  for (int r = 0; r < rounds; ++r) {
    for (Phase* p : phases) {
      RETURN_IF_ERROR(RunPhase(*p, round, true));
    }
  }
  return absl::OkStatus();
}

// A phase whose threads fetch decode steps with `fetchers` (one per thread),
// checking the last rows of each thread against the table.
Phase StepPhase(std::string config, std::string path, std::vector<FetchStep> fetchers,
                const Workload& w) {
  Phase p;
  p.config = std::move(config);
  p.path = std::move(path);
  p.clients = static_cast<int>(fetchers.size());
  p.rows_per_request = static_cast<double>(w.steps.ids_per_step());
  p.bytes_per_row = w.rows.row_bytes();
  auto next_step = std::make_shared<uint64_t>(0);
  p.run = [fetchers = std::move(fetchers), next_step, &w](const LoopLimits& l) {
    return RunLoop(l, fetchers, w.steps.n_steps(), next_step.get(),
                   [&w](size_t step, RowPieces rows) {
                     return CheckStepRows(w.steps, step, w.rows, JoinPieces(rows));
                   });
  };
  return p;
}

// FetchStep over a client of the shard's Lookup (RawLookupClient,
// ProtoLookupClient or StreamLookupClient): one Lookup of the step's layers.
template <typename Client>
FetchStep LookupFetcher(std::shared_ptr<Client> client, const Workload& w) {
  std::vector<wire::LayerRowIds> layers(w.steps.n_layers());
  return [client, layers, &w](size_t step) mutable {
    for (int l = 0; l < w.steps.n_layers(); ++l) {
      layers[l] = {static_cast<uint32_t>(l), w.steps.Layer(step, l)};
    }
    return client->Lookup(layers, w.rows_bytes);
  };
}

template <typename Client>
FetchStep GrpcFetcher(int port, const Workload& w) {
  return LookupFetcher(std::make_shared<Client>(BenchChannel(port)), w);
}

FetchStep StreamFetcher(int port, int stream_port, const Workload& w) {
  return LookupFetcher(std::make_shared<StreamLookupClient>(BenchChannel(port), stream_port), w);
}

FetchStep TcpFetcher(std::shared_ptr<TcpRowClient> client, const Workload& w) {
  auto rows = std::make_shared<std::vector<uint8_t>>(w.rows_bytes);
  auto piece = std::make_shared<std::span<const uint8_t>>(*rows);
  std::vector<std::span<const uint64_t>> layers(w.steps.n_layers());
  return [client, rows, piece, layers, &w](size_t step) mutable -> absl::StatusOr<RowPieces> {
    for (int l = 0; l < w.steps.n_layers(); ++l) layers[l] = w.steps.Layer(step, l);
    RETURN_IF_ERROR(client->Exchange(layers, *rows));
    return RowPieces(piece.get(), 1);
  };
}

Phase DiskPhase(const Workload& w) {
  Phase p;
  p.config = "hot 0%, direct I/O";
  p.path = "O_DIRECT 4 KiB preads (ceiling)";
  p.clients = absl::GetFlag(FLAGS_disk_threads);
  p.rows_per_request = 1;
  p.bytes_per_row = kDiskBlock;
  p.run = [&w](const LoopLimits& l) -> absl::StatusOr<LoopResult> {
    RawDiskOptions o;
    o.files = w.table.sst_files;
    o.threads = absl::GetFlag(FLAGS_disk_threads);
    o.block_bytes = kDiskBlock;
    o.duration = l.duration;
    o.max_reads = l.max_requests * w.steps.ids_per_step();
    ASSIGN_OR_RETURN(RawDiskResult r, MeasureRandomReads(o));
    LoopResult result;
    result.requests = r.reads;
    result.seconds = r.seconds;
    result.latency_us = std::move(r.latency_us);
    return result;
  };
  return p;
}

std::string DefaultShardBinary() {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "engram-shard";
  std::string path(self, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/') + 1) + "engram-shard";
}

absl::StatusOr<std::unique_ptr<ShardDaemon>> StartDaemon(const Workload& w, uint64_t ram_budget,
                                                         bool direct_io) {
  ShardDaemonOptions o;
  o.binary = absl::GetFlag(FLAGS_shard_binary);
  if (o.binary.empty()) o.binary = DefaultShardBinary();
  o.db_dir = w.table.shard_dir;
  o.ram_budget_bytes = ram_budget;
  o.direct_io = direct_io;
  o.reader_threads = absl::GetFlag(FLAGS_reader_threads);
  std::fprintf(stderr, "bench-shard: starting %s (ram budget %.1f MB%s)\n", o.binary.c_str(),
               static_cast<double>(ram_budget) / 1e6, direct_io ? ", direct I/O" : "");
  return ShardDaemon::Start(o, w.steps.n_layers());
}

// The --ram-budget that gives the hot tier `share` of the whole shard
// (ShardFootprint::share_budget; the table's row bytes alone hold about
// nine tenths of the rows).
absl::StatusOr<uint64_t> HotBudget(const Workload& w, double share) {
  ASSIGN_OR_RETURN(ShardFootprint f, MeasureShardFootprint(w.table.shard_dir, /*direct_io=*/false));
  return f.share_budget(share);
}

void AttachDaemon(const ShardDaemon* daemon, Phase* p) {
  p->counters = [daemon] { return daemon->Counters(); };
}

// What the report prints for one phase; plain data, outlives the servers.
struct Row {
  std::string config;
  std::string path;
  int clients = 0;
  uint64_t requests = 0;
  double rows_per_second = 0;
  double mb_per_second = 0;
  double p50_us = 0;
  double p99_us = 0;
  // -1 where it does not apply (no tiers, no server).
  double hot_share = -1;
  double server_cores = -1;
  double client_cores = -1;
  double handler_us = -1;         // mean per request
  double cpu_ms_per_request = 0;  // server + client
  ServerCounters served;
};

Row Summarize(const Phase& p) {
  Row r;
  r.config = p.config;
  r.path = p.path;
  r.clients = p.clients;
  r.requests = p.total.requests;
  r.rows_per_second = p.rows_per_second();
  r.mb_per_second = r.rows_per_second * p.bytes_per_row / 1e6;
  r.p50_us = p.total.latency_us.Percentile(0.50);
  r.p99_us = p.p99_us();
  if (p.served.rows() > 0) r.hot_share = p.served.hot_share();
  if (p.counters && p.total.seconds > 0) {
    r.server_cores = p.served.cpu_seconds / p.total.seconds;
    const double client_cpu =
        p.total.process_cpu_seconds - (p.server_in_process ? p.served.cpu_seconds : 0);
    r.client_cores = client_cpu / p.total.seconds;
    if (p.total.requests > 0) {
      r.cpu_ms_per_request =
          1e3 * (client_cpu + p.served.cpu_seconds) / static_cast<double>(p.total.requests);
    }
  }
  if (p.served.requests > 0) {
    r.handler_us = 1e6 * p.served.handler_seconds / p.served.requests;
  }
  r.served = p.served;
  return r;
}

struct Report {
  Row tcp, stream, raw, proto, tenth, raw_disk, tail1, tail2;
  bool has_proto = false;
};

// Hot tier 100%: the bare TCP exchange, the row stream, gRPC raw, gRPC
// protobuf.
absl::Status MeasureHot(const Workload& w, int rounds, absl::Duration warmup, Report* report) {
  TcpRowServerOptions tcp_options;
  tcp_options.rows = w.rows.data();
  tcp_options.row_bytes = w.rows.row_bytes();
  tcp_options.layer_base.assign(w.rows.layer_base().begin(), w.rows.layer_base().end());
  tcp_options.layer_rows = w.table.map.layer_rows;
  ASSIGN_OR_RETURN(std::unique_ptr<TcpRowServer> tcp_server, TcpRowServer::Start(tcp_options));
  ASSIGN_OR_RETURN(std::unique_ptr<TcpRowClient> tcp_client,
                   TcpRowClient::Connect(tcp_server->port()));
  ASSIGN_OR_RETURN(const uint64_t budget, HotBudget(w, 1.0));
  ASSIGN_OR_RETURN(auto daemon, StartDaemon(w, budget, false));
  const int port = daemon->port();

  Phase tcp = StepPhase("hot 100%", "bare TCP exchange (ceiling)",
                        {TcpFetcher(std::move(tcp_client), w)}, w);
  tcp.counters = [s = tcp_server.get()]() -> absl::StatusOr<ServerCounters> {
    const TcpRowServerStats stats = s->stats();
    ServerCounters c;
    c.requests = static_cast<double>(stats.requests);
    c.handler_seconds = stats.handler_seconds;
    c.cpu_seconds = stats.cpu_seconds;
    return c;
  };
  tcp.server_in_process = true;
  Phase stream = StepPhase("hot 100%", "row stream (ours)",
                           {StreamFetcher(port, daemon->stream_port(), w)}, w);
  Phase raw = StepPhase("hot 100%", "gRPC raw ByteBuffer (ours)",
                        {GrpcFetcher<RawLookupClient>(port, w)}, w);
  Phase proto =
      StepPhase("hot 100%", "gRPC protobuf stub", {GrpcFetcher<ProtoLookupClient>(port, w)}, w);
  AttachDaemon(daemon.get(), &stream);
  AttachDaemon(daemon.get(), &raw);
  AttachDaemon(daemon.get(), &proto);
  std::vector<Phase*> phases = {&tcp, &stream, &raw};
  report->has_proto = absl::GetFlag(FLAGS_proto);
  if (report->has_proto) phases.push_back(&proto);
  RETURN_IF_ERROR(Measure(phases, warmup, rounds));
  report->tcp = Summarize(tcp);
  report->stream = Summarize(stream);
  report->raw = Summarize(raw);
  report->proto = Summarize(proto);
  return absl::OkStatus();
}

// Hot tier 10% of the shard (pinned from the profile, plus the admission
// cache), the rest from RocksDB through the page cache.
absl::Status MeasureTenth(const Workload& w, absl::Duration warmup, Report* report) {
  ASSIGN_OR_RETURN(const uint64_t budget, HotBudget(w, 0.1));
  ASSIGN_OR_RETURN(auto daemon, StartDaemon(w, budget, false));
  Phase tenth = StepPhase("hot 10%", "gRPC raw ByteBuffer (ours)",
                          {GrpcFetcher<RawLookupClient>(daemon->port(), w)}, w);
  AttachDaemon(daemon.get(), &tenth);
  RETURN_IF_ERROR(Measure({&tenth}, warmup * 2, 1));
  report->tenth = Summarize(tenth);
  return absl::OkStatus();
}

// Hot tier 0, direct I/O: gRPC raw with 1 and 2 clients against the
// O_DIRECT read ceiling over the same SST files.
absl::Status MeasureTail(const Workload& w, int rounds, absl::Duration warmup, Report* report) {
  ASSIGN_OR_RETURN(auto daemon, StartDaemon(w, 0, true));
  const int port = daemon->port();
  Phase raw_disk = DiskPhase(w);
  Phase tail1 = StepPhase("hot 0%, direct I/O", "gRPC raw ByteBuffer (ours)",
                          {GrpcFetcher<RawLookupClient>(port, w)}, w);
  Phase tail2 =
      StepPhase("hot 0%, direct I/O", "gRPC raw ByteBuffer (ours)",
                {GrpcFetcher<RawLookupClient>(port, w), GrpcFetcher<RawLookupClient>(port, w)}, w);
  AttachDaemon(daemon.get(), &tail1);
  AttachDaemon(daemon.get(), &tail2);
  RETURN_IF_ERROR(Measure({&raw_disk, &tail1, &tail2}, warmup, rounds));
  report->raw_disk = Summarize(raw_disk);
  report->tail1 = Summarize(tail1);
  report->tail2 = Summarize(tail2);
  return absl::OkStatus();
}

// `value` formatted with `format`, or "-" when it is negative (n/a).
std::string Cell(const char* format, double value) {
  if (value < 0) return "-";
  char text[32];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

void PrintRow(const Row& r) {
  if (r.config.empty()) return;  // not run (--configs)
  std::printf("%-18s %-30s %3d %8llu %10.0f %7.1f %7.3f %7.3f %7s %6s %5s %5s\n", r.config.c_str(),
              r.path.c_str(), r.clients, static_cast<unsigned long long>(r.requests),
              r.rows_per_second, r.mb_per_second, r.p50_us / 1e3, r.p99_us / 1e3,
              Cell("%.1f%%", r.hot_share * 100).c_str(), Cell("%.3f", r.handler_us / 1e3).c_str(),
              Cell("%.2f", r.server_cores).c_str(), Cell("%.2f", r.client_cores).c_str());
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

const char* Verdict(bool met) { return met ? "met" : "MISSED"; }

void PrintHotRatios(const Report& r, double hot_ratio, double p99_ratio);
void PrintTailRatios(const Workload& w, const Report& r, double disk1, double disk2);

void PrintReport(const Workload& w, const Report& r) {
  std::printf("%-18s %-30s %3s %8s %10s %7s %7s %7s %7s %6s %5s %5s\n", "config", "path", "cli",
              "requests", "rows/s", "MB/s", "p50 ms", "p99 ms", "hot-hit", "srv ms", "srv-c",
              "cli-c");
  PrintRow(r.tcp);
  PrintRow(r.stream);
  PrintRow(r.raw);
  if (r.has_proto) PrintRow(r.proto);
  PrintRow(r.tenth);
  PrintRow(r.raw_disk);
  PrintRow(r.tail1);
  PrintRow(r.tail2);
  std::printf(
      "(MB/s counts row bytes; the O_DIRECT row counts 4 KiB reads, its "
      "p50/p99 per read; hot-hit = rows served from RAM "
      "(engram_shard_rows_total); srv ms = mean time in the server's handler "
      "per request: parse, gather and disk reads, not the send "
      "(engram_shard_request_duration_seconds; the TCP server's own clock); "
      "srv-c / cli-c = server / client CPU cores busy (/proc/PID/stat, the "
      "TCP server thread's clock; getrusage of this process, gRPC's own "
      "threads included))\n\n");

  const double hot_ratio = Ratio(r.stream.rows_per_second, r.tcp.rows_per_second);
  const double p99_ratio = Ratio(r.stream.p99_us, r.tcp.p99_us);
  const double disk1 = Ratio(r.tail1.rows_per_second, r.raw_disk.rows_per_second);
  const double disk2 = Ratio(r.tail2.rows_per_second, r.raw_disk.rows_per_second);
  const double disk_ratio = std::max(disk1, disk2);
  if (r.tcp.requests > 0) PrintHotRatios(r, hot_ratio, p99_ratio);
  if (r.raw_disk.requests > 0) PrintTailRatios(w, r, disk1, disk2);
  std::printf(
      "bench-shard: hot_tcp_ratio=%.3f hot_p99_ratio=%.3f "
      "disk_ratio=%.3f\n",
      hot_ratio, p99_ratio, disk_ratio);
}

void PrintHotRatios(const Report& r, double hot_ratio, double p99_ratio) {
  std::printf(
      "hot 100%%: row stream / bare TCP: rows/s %.3f (target >= 0.85: %s), "
      "p99 %.3f (target <= 1.5: %s)\n",
      hot_ratio, Verdict(hot_ratio >= 0.85), p99_ratio, Verdict(p99_ratio <= 1.5));
  std::printf(
      "hot 100%%: CPU per request (server + client): bare TCP %.2f ms, "
      "row stream %.2f ms (%.2fx)\n",
      r.tcp.cpu_ms_per_request, r.stream.cpu_ms_per_request,
      Ratio(r.stream.cpu_ms_per_request, r.tcp.cpu_ms_per_request));
  std::printf("hot 100%%: gRPC raw / bare TCP: rows/s %.3f, p99 %.3f (context)\n",
              Ratio(r.raw.rows_per_second, r.tcp.rows_per_second),
              Ratio(r.raw.p99_us, r.tcp.p99_us));
  for (const Row* row : {&r.stream, &r.raw}) {
    if (row->hot_share >= 0 && row->hot_share < 1) {
      std::printf(
          "hot 100%%: WARNING: %.1f%% of %s's rows came from RAM, not all: the "
          "shard's --ram-budget did not hold the whole shard, so these ratios "
          "include disk reads\n",
          row->hot_share * 100, row->path.c_str());
    }
  }
  if (r.has_proto) {
    std::printf(
        "hot 100%%: plain gRPC/protobuf / bare TCP: rows/s %.3f, p99 "
        "%.3f (context)\n",
        Ratio(r.proto.rows_per_second, r.tcp.rows_per_second), Ratio(r.proto.p99_us, r.tcp.p99_us));
  }
}

// The best of 1 and 2 clients counts.
void PrintTailRatios(const Workload& w, const Report& r, double disk1, double disk2) {
  const double disk_ratio = std::max(disk1, disk2);
  std::printf(
      "hot 0%%, direct I/O: gRPC raw rows/s / O_DIRECT 4 KiB reads/s: "
      "1 client %.3f, 2 clients %.3f; best %.3f (target >= 0.80: %s)\n",
      disk1, disk2, disk_ratio, Verdict(disk_ratio >= 0.80));
  const ServerCounters tail = r.tail1.served;
  std::printf(
      "tail check: engram-shard --direct-io (RocksDB use_direct_reads), no "
      "RocksDB block cache (RowStoreOptions::block_cache_bytes 0), hot tier "
      "0; %.0f%% of the 1-client rows came from disk, %.2f SST block reads "
      "per disk row (rows repeat within a step: %.1f%% distinct); the "
      "ceiling preads the same %zu SST files with O_DIRECT, %d threads\n",
      tail.rows() > 0 ? 100 * tail.disk / tail.rows() : 0, Ratio(tail.file_reads, tail.disk),
      w.steps.distinct_share() * 100, w.table.sst_files.size(), absl::GetFlag(FLAGS_disk_threads));
}

absl::Status Run() {
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  const absl::Duration warmup = absl::GetFlag(FLAGS_warmup);
  BenchTableOptions table_options;
  table_options.work_dir = absl::GetFlag(FLAGS_work_dir);
  table_options.engram_vocab_size = absl::GetFlag(FLAGS_engram_vocab_size);
  absl::StatusOr<BenchTable> table = PrepareBenchTable(table_options);
  if (!table.ok()) return table.status();
  DecodeStepOptions step_options;
  step_options.steps = absl::GetFlag(FLAGS_steps);
  absl::StatusOr<DecodeSteps> steps = DecodeSteps::Generate(table->layout, step_options);
  if (!steps.ok()) return steps.status();
  absl::StatusOr<RowArray> rows = RowArray::Build(*table);
  if (!rows.ok()) return rows.status();
  Workload w{*std::move(table), *std::move(steps), *std::move(rows), 0};
  w.rows_bytes = w.steps.ids_per_step() * w.rows.row_bytes();

  std::printf(
      "engram-bench-shard: %u cores; v41 table of %llu rows (%zu "
      "layers, %.0f MB) as 1 shard in %s (%s)\n",
      std::thread::hardware_concurrency(), static_cast<unsigned long long>(w.table.shard_rows),
      w.table.map.layer_rows.size(), static_cast<double>(w.table.shard_bytes) / 1e6,
      w.table.shard_dir.c_str(), w.table.reused ? "reused" : "built");
  std::printf(
      "workload: %zu ids per request (%d seqs x %d layers x %d cols), "
      "%u-byte rows, %.2f MB per response; Zipf %.1f tokens; %zu "
      "steps hashed up front, cycled\n",
      w.steps.ids_per_step(), step_options.batch, w.steps.n_layers(), w.table.layout.n_cols(),
      w.rows.row_bytes(), static_cast<double>(w.rows_bytes) / 1e6, step_options.zipf_exponent,
      w.steps.n_steps());
  std::printf(
      "server: the engram-shard daemon as a child process on "
      "127.0.0.1, --reader-threads %d; each client thread has its own "
      "channel and sends back to back; every loop checks its last "
      "response's rows\n",
      absl::GetFlag(FLAGS_reader_threads));
  std::printf(
      "timing: %s per configuration in %d alternating rounds (cap "
      "%llu requests), after %s of warm-up\n\n",
      absl::FormatDuration(absl::GetFlag(FLAGS_duration)).c_str(), rounds,
      static_cast<unsigned long long>(absl::GetFlag(FLAGS_max_requests)),
      absl::FormatDuration(warmup).c_str());
  std::fflush(stdout);

  Report report;
  const std::string configs = absl::GetFlag(FLAGS_configs);
  auto wanted = [&configs](const char* name) {
    return absl::StrContains(absl::StrCat(",", configs, ","), absl::StrCat(",", name, ","));
  };
  if (wanted("hot")) {
    RETURN_IF_ERROR(MeasureHot(w, rounds, warmup, &report));
  }
  if (wanted("tenth")) {
    RETURN_IF_ERROR(MeasureTenth(w, warmup, &report));
  }
  if (wanted("tail")) {
    RETURN_IF_ERROR(MeasureTail(w, rounds, warmup, &report));
  }
  PrintReport(w, report);
  return absl::OkStatus();
}

}  // namespace
}  // namespace engram::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "engram-bench-shard [--work-dir DIR] [--duration 5s] [--rounds 10] ...\n"
      "Shard server Lookup vs bare TCP and O_DIRECT ceilings; see "
      "docs/benchmarks.md. Flags may be spelled with dashes or underscores.");
  engram::ParseFlags(argc, argv);
  if (absl::Status s = engram::bench::Run(); !s.ok()) {
    std::fprintf(stderr, "engram-bench-shard: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

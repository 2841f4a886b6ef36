#include "bench/engram_bench/engram_bench_measure.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "bench/common/raw_disk.h"
#include "bench/engram_bench/engram_bench_proc.h"
#include "common/util/status_macros.h"

namespace engram::bench {
namespace {

constexpr uint32_t kDiskBlock = 4096;

double PerMillion(double seconds, double rows) { return rows > 0 ? seconds / (rows / 1e6) : 0; }

}  // namespace

double Measurement::server_cpu_per_mrow() const {
  return has_server ? PerMillion(served.server_cpu_seconds, rows()) : -1;
}

double Measurement::client_cpu_per_mrow() const {
  const double own = loop.process_cpu_seconds - (server_in_process ? served.server_cpu_seconds : 0);
  return PerMillion(std::max(0.0, own), rows());
}

double Measurement::wire_bytes_per_row() const {
  if (!has_server || served.wire_rows <= 0) return -1;
  return served.wire_bytes / served.wire_rows;
}

absl::StatusOr<std::vector<Measurement>> MeasureSystems(
    const std::string& table_label, std::span<BenchSystem* const> systems, const StepStream& stream,
    int connections, const RowArray& table, const RoundLimits& limits,
    const std::function<absl::Status()>& after_round) {
  struct Running {
    BenchSystem* system;
    FetchStep fetch;
    uint64_t next_step = 0;
    Measurement m;
  };
  std::vector<Running> running;
  for (BenchSystem* system : systems) {
    const int n = system->networked() ? connections : 1;
    absl::StatusOr<FetchStep> fetch = system->NewFetcher(stream, n);
    if (!fetch.ok()) {
      return absl::Status(fetch.status().code(),
                          absl::StrCat(system->name(), ": ", fetch.status().message()));
    }
    Running r{system, *std::move(fetch), 0, {}};
    r.m.table = table_label;
    r.m.stream = stream.name();
    r.m.system = system->name();
    r.m.connections = system->networked() ? n : 0;
    r.m.rows_per_request = static_cast<double>(stream.ids_per_step());
    r.m.row_bytes = table.row_bytes();
    r.m.has_server = system->networked();
    r.m.server_in_process = system->server_in_process();
    running.push_back(std::move(r));
  }
  const CheckStep check = [&stream, &table](size_t step, RowPieces rows) {
    return CheckRows(stream, step, table, JoinPieces(rows));
  };
  auto loop = [&](Running& r, const LoopLimits& l, bool record) -> absl::Status {
    ASSIGN_OR_RETURN(SystemCounters before, r.system->Counters());
    absl::StatusOr<LoopResult> result =
        RunLoop(l, std::span<const FetchStep>(&r.fetch, 1), stream.n_steps(), &r.next_step, check);
    if (!result.ok()) {
      return absl::Status(result.status().code(), absl::StrCat(r.m.system, ", ", r.m.stream, ": ",
                                                               result.status().message()));
    }
    ASSIGN_OR_RETURN(SystemCounters after, r.system->Counters());
    if (record) {
      r.m.loop.Merge(*result);
      r.m.served += after - before;
    }
    return absl::OkStatus();
  };
  LoopLimits warm;
  warm.duration = limits.warmup;
  warm.max_requests = std::max<uint64_t>(1, limits.max_requests / 10);
  for (Running& r : running) {
    RETURN_IF_ERROR(loop(r, warm, false));
  }
  const int rounds = std::max(1, limits.rounds);
  LoopLimits round;
  round.duration = limits.duration / rounds;
  round.max_requests = std::max<uint64_t>(1, limits.max_requests / static_cast<uint64_t>(rounds));
  for (int k = 0; k < rounds; ++k) {
    for (Running& r : running) {
      RETURN_IF_ERROR(loop(r, round, true));
    }
    if (after_round) {
      RETURN_IF_ERROR(after_round());
    }
  }
  std::vector<Measurement> out;
  for (Running& r : running) out.push_back(std::move(r.m));
  return out;
}

absl::StatusOr<Measurement> MeasureRawDisk(const std::string& table_label,
                                           const std::vector<std::string>& files, int threads,
                                           const RoundLimits& limits) {
  RawDiskOptions o;
  o.files = files;
  o.threads = threads;
  o.block_bytes = kDiskBlock;
  o.duration = limits.duration;
  o.max_reads = limits.max_requests * 1000;
  const double cpu0 = SelfCpuSeconds();
  ASSIGN_OR_RETURN(RawDiskResult r, MeasureRandomReads(o));
  Measurement m;
  m.table = table_label;
  m.stream = "4 KiB reads";
  m.system = absl::StrCat("raw O_DIRECT QD", threads);
  m.rows_per_request = 1;
  m.row_bytes = kDiskBlock;
  m.loop.requests = r.reads;
  m.loop.seconds = r.seconds;
  m.loop.process_cpu_seconds = SelfCpuSeconds() - cpu0;
  m.loop.latency_us = std::move(r.latency_us);
  return m;
}

}  // namespace engram::bench

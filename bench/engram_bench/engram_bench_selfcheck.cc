#include "bench/engram_bench/engram_bench_selfcheck.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/common/raw_disk.h"
#include "bench/engram_bench/engram_bench_systems.h"
#include "common/util/file_util.h"
#include "common/util/status_macros.h"

namespace engram::bench {
namespace {

constexpr int64_t kVocab = 2000;  // v41 preset: ~97k rows, 26 MB
constexpr int kWideSteps = 40;
constexpr uint64_t kDiskReads = 64;

// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/engram-bench-check-XXXXXX");
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~ScratchDir() {
    if (!path_.empty()) (void)RemoveTree(path_);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A system under check, and whether it also gets the full-size decode
// steps (the client library's systems in RAM: their replies race the
// sending of a step's next layer).
struct Checked {
  std::unique_ptr<BenchSystem> system;
  bool wide = false;
};

absl::StatusOr<std::vector<Checked>> StartAll(const BenchEnv& env, const BenchData& d) {
  std::vector<Checked> systems;
  auto add = [&](absl::StatusOr<std::unique_ptr<BenchSystem>> s, bool wide) -> absl::Status {
    if (!s.ok()) return s.status();
    systems.push_back({*std::move(s), wide});
    return absl::OkStatus();
  };
  struct Engram {
    const char* name;
    const std::vector<std::string>* dirs;
    double hot_share;
    bool direct_io;
    bool pipeline_layers;
  };
  for (const Engram& e : {Engram{"engram 1 shard", &d.one_shard, 1.0, false, false},
                          Engram{"engram 1 shard, pipelined", &d.one_shard, 1.0, false, true},
                          Engram{"engram 3 shards", &d.three_shards, 1.0, false, false},
                          Engram{"engram 1 shard, tail", &d.one_shard, 0.0, true, false}}) {
    EngramSystemOptions o;
    o.name = e.name;
    o.shard_binary = env.shard_binary;
    o.table_dir = d.workload.table_dir;
    o.shard_dirs = *e.dirs;
    o.hot_share = e.hot_share;
    o.direct_io = e.direct_io;
    o.pipeline_layers = e.pipeline_layers;
    o.log_dir = env.work_dir;
    RETURN_IF_ERROR(add(StartEngram(o), !e.direct_io));
  }
  EngramSystemOptions raw;
  raw.name = "gRPC, no client library";
  raw.shard_binary = env.shard_binary;
  raw.shard_dirs = d.one_shard;
  raw.log_dir = env.work_dir;
  RETURN_IF_ERROR(add(StartRawGrpc(raw, d.map.row_bytes[0]), false));
  RedisServerOptions redis;
  redis.binary = env.redis_binary;
  redis.work_dir = env.work_dir;
  // Small MGETs, so a step takes several pipelined ones.
  RETURN_IF_ERROR(add(StartRedis(redis, d.rows, d.map.layer_rows, 50), false));
  RETURN_IF_ERROR(add(StartTcp(d.rows, d.map.layer_rows), false));
  RETURN_IF_ERROR(add(NewMemoryGather(d.rows), false));
  RETURN_IF_ERROR(add(OpenRocksDb("rocksdb", d.one_shard[0], false), false));
  RETURN_IF_ERROR(add(OpenRocksDb("rocksdb, direct I/O", d.one_shard[0], true), false));
  return systems;
}

// Fetches every step of `stream` twice (the second pass wraps around, as
// the timed loops do) and compares each with the table.
absl::Status CheckSystem(BenchSystem& system, const StepStream& stream, int connections,
                         const RowArray& rows, int* batches) {
  ASSIGN_OR_RETURN(FetchStep fetch, system.NewFetcher(stream, connections));
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t step = 0; step < stream.n_steps(); ++step) {
      ASSIGN_OR_RETURN(RowPieces got, (fetch)(step));
      RETURN_IF_ERROR(CheckRows(stream, step, rows, JoinPieces(got)));
      ++*batches;
    }
  }
  return system.Counters().status();
}

absl::Status Check(const BenchEnv& base) {
  ScratchDir dir;
  if (dir.path().empty()) return absl::InternalError("cannot create a temporary directory");
  BenchEnv env = base;
  env.work_dir = dir.path();
  TableSpec spec;
  spec.vocab = kVocab;
  spec.trace = dir.path() + "/zipf.trace";
  spec.three_shards = true;
  RETURN_IF_ERROR(WriteZipfTrace(spec.trace, 64, 256, 1.1, 3));
  ASSIGN_OR_RETURN(std::unique_ptr<BenchData> data, PrepareBenchData(env, spec));
  const BenchData& d = *data;
  ASSIGN_OR_RETURN(std::vector<Checked> systems, StartAll(env, d));

  StreamSpec decode;
  decode.batch = 8;
  decode.prefill = 8;
  decode.steps = 5;
  StreamSpec prefill;
  prefill.batch = 2;
  prefill.tokens = 64;
  prefill.steps = 3;
  // Full-size decode steps: RPCs long enough for a reply to race the
  // sending of the next layer.
  StreamSpec wide;
  wide.batch = 256;
  wide.prefill = 4;
  wide.steps = kWideSteps;
  struct Stream {
    StreamSpec spec;
    bool wide;
  };
  for (const Stream& each : {Stream{decode, false}, Stream{prefill, false}, Stream{wide, true}}) {
    ASSIGN_OR_RETURN(StepStream stream, StepStream::Build(d.trace, *d.hasher, each.spec));
    for (int connections : {1, 2}) {
      for (const auto& [system, check_wide] : systems) {
        if (connections > 1 && !system->networked()) continue;
        if (each.wide && !check_wide) continue;
        int batches = 0;
        if (absl::Status s = CheckSystem(*system, stream, connections, d.rows, &batches); !s.ok()) {
          return absl::Status(s.code(), absl::StrCat(system->name(), ", ", stream.name(), ", ",
                                                     connections, " connection(s): ", s.message()));
        }
        std::printf("self-check: %-27s %-16s %d connection(s): %d batches ok\n",
                    system->name().c_str(), stream.name().c_str(), connections, batches);
      }
    }
  }
  RawDiskOptions disk;
  disk.files = d.sst_files;
  disk.threads = 4;
  disk.max_reads = kDiskReads;
  disk.duration = absl::Seconds(20);
  absl::StatusOr<RawDiskResult> reads = MeasureRandomReads(disk);
  if (!reads.ok()) return reads.status();
  if (reads->reads != kDiskReads) {
    return absl::InternalError(
        absl::StrCat("raw O_DIRECT: ", reads->reads, " reads of ", kDiskReads));
  }
  std::printf("self-check: raw O_DIRECT reads: %llu of %zu SST files ok\n",
              static_cast<unsigned long long>(reads->reads), d.sst_files.size());
  return absl::OkStatus();
}

}  // namespace

int RunSelfCheck(const BenchEnv& env) {
  if (absl::Status s = Check(env); !s.ok()) {
    std::fprintf(stderr, "engram-bench --self-check: FAILED: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  std::printf("self-check: ok\n");
  return 0;
}

}  // namespace engram::bench

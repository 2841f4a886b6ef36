#include "bench/engram_bench_selfcheck.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/engram_bench_systems.h"
#include "bench/raw_disk.h"
#include "shard/file_util.h"

namespace engram::bench {
namespace {

constexpr int64_t kVocab = 400;  // v41 preset: ~19k rows, 5 MB
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

absl::StatusOr<std::vector<std::unique_ptr<BenchSystem>>> StartAll(const BenchEnv& env,
                                                                   const BenchData& d) {
  std::vector<std::unique_ptr<BenchSystem>> systems;
  auto add = [&](absl::StatusOr<std::unique_ptr<BenchSystem>> s) -> absl::Status {
    if (!s.ok()) return s.status();
    systems.push_back(*std::move(s));
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
    if (absl::Status s = add(StartEngram(o)); !s.ok()) return s;
  }
  {
    EngramSystemOptions o;
    o.name = "gRPC, no client library";
    o.shard_binary = env.shard_binary;
    o.shard_dirs = d.one_shard;
    o.log_dir = env.work_dir;
    if (absl::Status s = add(StartRawGrpc(o, d.map.row_bytes[0])); !s.ok()) return s;
  }
  RedisServerOptions redis;
  redis.binary = env.redis_binary;
  redis.work_dir = env.work_dir;
  // Small MGETs, so a step takes several pipelined ones.
  if (absl::Status s = add(StartRedis(redis, d.rows, d.map.layer_rows, 50)); !s.ok()) return s;
  if (absl::Status s = add(StartTcp(d.rows, d.map.layer_rows)); !s.ok()) return s;
  systems.push_back(NewMemoryGather(d.rows));
  if (absl::Status s = add(OpenRocksDb("rocksdb", d.one_shard[0], false)); !s.ok()) return s;
  if (absl::Status s = add(OpenRocksDb("rocksdb, direct I/O", d.one_shard[0], true)); !s.ok()) {
    return s;
  }
  return systems;
}

// Fetches every step of `stream` twice (the second pass wraps around, as
// the timed loops do) and compares each with the table.
absl::Status CheckSystem(BenchSystem& system, const StepStream& stream, int connections,
                         const RowArray& rows, int* batches) {
  absl::StatusOr<FetchStep> fetch = system.NewFetcher(stream, connections);
  if (!fetch.ok()) return fetch.status();
  for (int pass = 0; pass < 10; ++pass) {
    for (size_t step = 0; step < stream.n_steps(); ++step) {
      absl::StatusOr<std::span<const uint8_t>> got = (*fetch)(step);
      if (!got.ok()) return got.status();
      if (absl::Status s = CheckRows(stream, step, rows, *got); !s.ok()) return s;
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
  spec.vocab = 6000;
  spec.trace = dir.path() + "/zipf.trace";
  spec.three_shards = true;
  if (absl::Status s = WriteZipfTrace(spec.trace, 64, 256, 1.1, 3); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<BenchData>> data = PrepareBenchData(env, spec);
  if (!data.ok()) return data.status();
  const BenchData& d = **data;
  absl::StatusOr<std::vector<std::unique_ptr<BenchSystem>>> systems = StartAll(env, d);
  if (!systems.ok()) return systems.status();

  StreamSpec decode;
  decode.batch = 256;
  decode.prefill = 8;
  decode.steps = 100;
  StreamSpec prefill;
  prefill.batch = 2;
  prefill.tokens = 64;
  prefill.steps = 3;
  for (const StreamSpec& spec_ : {decode, prefill}) {
    absl::StatusOr<StepStream> stream = StepStream::Build(d.trace, *d.hasher, spec_);
    if (!stream.ok()) return stream.status();
    for (int connections : {1, 2}) {
      for (const auto& system : *systems) {
        if (connections > 1 && !system->networked()) continue;
        int batches = 0;
        if (absl::Status s = CheckSystem(*system, *stream, connections, d.rows, &batches);
            !s.ok()) {
          return absl::Status(s.code(), absl::StrCat(system->name(), ", ", stream->name(), ", ",
                                                     connections, " connection(s): ", s.message()));
        }
        std::printf("self-check: %-27s %-16s %d connection(s): %d batches ok\n",
                    system->name().c_str(), stream->name().c_str(), connections, batches);
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

// The tables of engram-bench, ready to be served: the synthetic table and
// its shards (built once and cached by bench_client_setup.h), the token
// trace the workload replays, the hash, and every row in RAM.
#ifndef ENGRAM_BENCH_ENGRAM_BENCH_ENGRAM_BENCH_TABLES_H_
#define ENGRAM_BENCH_ENGRAM_BENCH_ENGRAM_BENCH_TABLES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/common/bench_client_setup.h"
#include "bench/shard/bench_shard_workload.h"
#include "common/format/shard_map.h"
#include "common/hash/engram_hash.h"
#include "inference/inference_loop.h"

namespace engram::bench {

// Where engram-bench finds its programs and keeps its files.
struct BenchEnv {
  std::string source_dir;    // the repository (tools/, docs/)
  std::string build_dir;     // parent of bin/
  std::string work_dir;      // traces, tables, shards, logs
  std::string shard_binary;  // engram-shard
  std::string redis_binary;  // redis-server
};

struct TableSpec {
  std::string preset = "v41";  // "v41" or "small"
  int64_t vocab = 20000;       // engram_vocab_size
  // A token trace (one sequence per line) and its token map; both empty =
  // real English text (see WorkloadOptions).
  std::string trace;
  std::string token_map;
  bool three_shards = false;  // also import it as 3 shards
};

// Immutable once prepared; thread-safe to read.
struct BenchData {
  Workload workload;
  std::vector<std::string> one_shard;     // the shard directory of 1
  std::vector<std::string> three_shards;  // empty unless asked for
  ShardMap map;
  uint64_t table_rows = 0;
  uint64_t table_bytes = 0;
  std::vector<std::string> sst_files;  // of the 1-shard directory
  std::unique_ptr<NgramHasher> hasher;
  TokenTrace trace{{}};  // the workload half of the trace
  RowArray rows;
};

// Builds or reuses everything under env.work_dir. Progress goes to stderr.
absl::StatusOr<std::unique_ptr<BenchData>> PrepareBenchData(const BenchEnv& env,
                                                            const TableSpec& spec);

// Writes `lines` sequences of `tokens` Zipf(exponent) tokens over the
// presets' vocabulary (kPresetVocabSize), one sequence per line.
absl::Status WriteZipfTrace(const std::string& path, int lines, int tokens, double exponent,
                            uint64_t seed);

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_ENGRAM_BENCH_ENGRAM_BENCH_TABLES_H_

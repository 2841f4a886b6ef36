// The inputs of engram-bench-client, built once and cached in a work
// directory keyed by their parameters: a token trace split into a profile
// half and a workload half (so the shards' hot-row profiles are learnt on
// other sequences than the ones replayed), a v41-geometry table, and its
// shards imported with the profile.
//
//   WORK/corpus.trace, token_map.json      real text (or zipf.trace)
//   WORK/<preset>-vocab<V>-<trace hash>/   one per (preset, vocab, trace, map)
//       profile.trace  workload.trace  table/  shards-<N>/shard-<i>/  stamp
//
// Not thread-safe; one benchmark per work directory at a time.
#ifndef ENGRAM_BENCH_COMMON_BENCH_CLIENT_SETUP_H_
#define ENGRAM_BENCH_COMMON_BENCH_CLIENT_SETUP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/codec/row_encoding.h"
#include "shard/shard_format.h"

namespace engram::bench {

struct WorkloadOptions {
  std::string work_dir;  // REQUIRED; created when missing
  // A token trace (one sequence per line). Empty = WORK/corpus.trace, made
  // on first use: copied from `demo_dir` when scripts/demo.sh left one there,
  // else by tools/make-trace --default-corpus (real English text, about a
  // minute), else (no node) a Zipf trace from tools/make-zipf-trace.
  std::string trace;
  // Token map for the table (tools/make-token-map). With `trace` empty it
  // is found or made alongside the trace; with `trace` given, empty = the
  // preset's random token map.
  std::string token_map;
  std::string demo_dir;               // e.g. build/demo; may be empty
  std::string source_dir;             // the repository (for tools/). REQUIRED
  int64_t engram_vocab_size = 20000;  // of the preset
  // The table's geometry (common/gen/table_gen.h): "v41" (264-byte rows) or
  // "small" (66-byte rows). Names the table's directory.
  std::string preset = "v41";
  // The rows' encoding (common/codec/row_encoding.h): the checkpoint's fp8
  // by default, or e.g. q2_k (84-byte rows for the v41 geometry). A
  // non-default encoding names the table's directory too.
  RowEncoding encoding = RowEncoding::kFp8;
};

struct Workload {
  std::string description;     // where the tokens came from, for the report
  std::string dir;             // WORK/<preset>-vocab<V>-<hash>
  std::string profile_trace;   // odd lines of the trace
  std::string workload_trace;  // even lines
  std::string table_dir;
};

// Finds or builds everything but the shards. Errors name the step that
// failed (a tool that did not run, a table that could not be written).
absl::StatusOr<Workload> PrepareWorkload(const WorkloadOptions& options);

// The shard directories of the workload's table split `n_shards` ways,
// imported with the profile trace in `tail_format` (cached; an import
// already there is reused as it is).
absl::StatusOr<std::vector<std::string>> PrepareShards(const Workload& workload, int n_shards,
                                                       TailFormat tail_format);

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_COMMON_BENCH_CLIENT_SETUP_H_

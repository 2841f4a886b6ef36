// Builds one shard directory from an Engram table, a DeepSeek-V4.1
// checkpoint or a DeepSeek-V4.1 GGUF.
//
// The import streams the source (never the whole table in memory), verifies
// each layer's manifest checksum on the way, and writes the shard's rows
// into a fresh RocksDB in the chosen tail format (shard/import/row_sink.h). It builds in a
// temporary directory next to --out and renames it into place only when complete, so a failed
// import leaves nothing behind and never touches existing data. See shard/shard_format.h for the
// directory layout.
#ifndef ENGRAM_SHARD_IMPORT_IMPORTER_H_
#define ENGRAM_SHARD_IMPORT_IMPORTER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/format/hot_profile.h"
#include "common/format/shard_map.h"
#include "common/hash/layout.h"
#include "shard/shard_format.h"

namespace engram {

struct ImportOptions {
  // The source (shard/import/row_source.h): exactly one of a table directory
  // (manifest.json + rows), an official safetensors checkpoint directory,
  // or a DeepSeek-V4.1 GGUF file (any split of a split set).
  std::string table_dir;
  std::string checkpoint_dir;
  std::string gguf_path;
  // Checkpoint and GGUF only: the table version recorded in the shard map
  // (0 = 1). A table directory carries its own version.
  uint64_t version = 0;

  uint32_t n_shards = 0;     // >= 1
  uint32_t shard_index = 0;  // < n_shards
  // The shard directory to create. It must not exist, be an empty
  // directory, or hold the same import (then nothing is done).
  std::string out_dir;
  // Optional token trace for the hot-row profile (common/format/hot_profile.h).
  std::string profile_trace;

  // How the rows are stored (shard_format.h): block-based tables by
  // default; kCuckoo for a tail the page cache holds (not with --direct-io).
  TailFormat tail_format = TailFormat::kBlock;

  // Bound on the size of each SST file written (and, for kCuckoo, of each
  // memtable: the import then holds about twice this in memory).
  uint64_t sst_file_bytes = uint64_t{256} << 20;
  // Rows read from the source per call (memory: chunk_rows * row_bytes).
  uint64_t chunk_rows = 4096;
};

struct ImportResult {
  // True when out_dir already held this very import; nothing was written.
  bool already_imported = false;
  // The source's Engram tensors that are not served (RowSource::UnservedTensors).
  std::vector<std::string> unserved_tensors;
  ShardMap map;
  ShardInfo info;
  uint64_t rows_written = 0;
  int sst_files = 0;
  uint64_t profile_rows = 0;  // entries in hot_profile.bin
};

// progress(done, total) counts source rows read (all layers); may be empty.
using ImportProgress = std::function<void(uint64_t done, uint64_t total)>;

// Errors: InvalidArgument for bad options or a malformed source (naming
// it), NotFound for a missing source, DataLoss when a layer's rows do not
// match the manifest checksum, FailedPrecondition when out_dir holds
// something else (a different import or foreign files).
absl::StatusOr<ImportResult> ImportShard(const ImportOptions& options,
                                         const ImportProgress& progress);

// Replays a token trace (one sequence per line, token ids separated by
// blanks; each line hashed as a fresh sequence from position 0) through
// `layout` and counts the accesses of rows that `shard` owns under `map`:
// the entries of the shard's hot_profile.bin (common/format/hot_profile.h), in file
// order. InvalidArgument naming the line for a token that is not an integer
// in [0, vocab_size); NotFound when the trace cannot be opened.
absl::StatusOr<std::vector<HotProfileEntry>> ProfileTrace(const std::string& trace_path,
                                                          const HashLayout& layout,
                                                          const ShardMap& map, uint32_t shard);

}  // namespace engram

#endif  // ENGRAM_SHARD_IMPORT_IMPORTER_H_
